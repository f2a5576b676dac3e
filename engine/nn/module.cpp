#include "engine/nn/module.h"

#include <stdexcept>

#include "engine/amp/policy.h"
#include "engine/hooks.h"

namespace ampcheck::nn {
namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

Tensor Module::operator()(const Tensor& x) {
  return call([&] { return forward(x); });
}

Tensor Module::call(const std::function<Tensor()>& body) {
  const ModuleScope scope(path_);
  const amp::Policy* policy = amp::active_policy();
  if (policy && policy->fp32_module(path_)) {
    // A module the user keeps in fp32: every op inside casts its floating inputs up.
    const amp::Autocast fp32(&policy->fp32_policy());
    return body();
  }
  return body();
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  if (t.defined()) t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, t);
  return t;
}

void Module::adopt(const std::string& name, std::shared_ptr<Module> child) {
  if (!child) throw std::invalid_argument(type_ + ": child module \"" + name + "\" is null");
  for (const auto& [n, c] : children_)
    if (n == name) throw std::invalid_argument(type_ + ": two children named \"" + name + "\"");
  child->set_path(join(path_, name));
  children_.emplace_back(name, std::move(child));
}

void Module::set_path(const std::string& path) {
  path_ = path;
  for (auto& [name, child] : children_) child->set_path(join(path_, name));
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : params_)
    if (t.defined()) out.emplace_back(join(path_, name), t);
  for (const auto& [name, child] : children_) {
    auto sub = child->named_parameters();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : buffers_)
    if (t.defined()) out.emplace_back(join(path_, name), t);
  for (const auto& [name, child] : children_) {
    auto sub = child->named_buffers();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out{{path_, this}};
  for (const auto& [name, child] : children_) {
    auto sub = child->named_modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{path_, this}};
  for (const auto& [name, child] : children_) {
    auto sub = child->named_modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::int64_t Module::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::cast_parameters(DType dtype, const std::function<bool(const Module&)>& keep) {
  if (!keep || !keep(*this))
    for (auto& [name, t] : params_)
      if (t.defined()) t.convert_(dtype);
  for (auto& [name, child] : children_) child->cast_parameters(dtype, keep);
}

void Module::to(Device device) {
  for (auto& [name, t] : params_)
    if (t.defined()) t.move_to_(device);
  for (auto& [name, t] : buffers_)
    if (t.defined()) t.move_to_(device);
  for (Tensor& t : constants_)
    if (t.defined()) t.move_to_(device);
  for (auto& [name, child] : children_) child->to(device);
}

Tensor Module::register_constant(Tensor t) {
  constants_.push_back(t);
  return t;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

}  // namespace ampcheck::nn
