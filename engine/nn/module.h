// Modules: parameters and buffers with hierarchical names ("encoder.layers.2.attn.q"),
// children, train/eval mode. The names are what reports show for each op instance.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/ops/ops.h"

namespace ampcheck::nn {

class Module {
 public:
  explicit Module(std::string type) : type_(std::move(type)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  // forward() inside this module's path, so observers can name the layer of each op.
  Tensor operator()(const Tensor& x);
  // `body` inside this module's path and fp32_modules policy, as operator() runs
  // forward(): for callers that drive a module with several inputs (a model graph's node).
  Tensor call(const std::function<Tensor()>& body);

  const std::string& type() const { return type_; }  // "Linear", "Conv2d", ...
  const std::string& path() const { return path_; }  // full dotted name; "" for the root

  // (full name, tensor), depth first in registration order.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;  // running stats
  std::vector<std::pair<std::string, const Module*>> named_modules() const;  // self first
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::int64_t parameter_count() const;

  // Converts in place the parameters of every module for which keep(module) is false
  // (AMP O2's decorate: keep(m) is true for normalisation layers). Buffers keep theirs.
  void cast_parameters(DType dtype, const std::function<bool(const Module&)>& keep = {});

  // Moves every parameter, buffer and constant of this module and its children to
  // `device` in place (the handles held elsewhere, an optimizer's or a closure's, follow).
  void to(Device device);

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  void zero_grad();

 protected:
  Tensor register_parameter(const std::string& name, Tensor t);  // requires grad
  Tensor register_buffer(const std::string& name, Tensor t);
  // A tensor the module computes with but neither trains nor reports (a mask, positions):
  // it only moves with the module (PyTorch's non-persistent buffer).
  Tensor register_constant(Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    adopt(name, m);
    return m;
  }

 private:
  void adopt(const std::string& name, std::shared_ptr<Module> child);
  void set_path(const std::string& path);

  std::string type_;
  std::string path_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<Tensor> constants_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace ampcheck::nn
