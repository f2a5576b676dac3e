#include "samples/runner.h"

#include <memory>
#include <stdexcept>

#include "engine/amp/decorate.h"
#include "engine/hooks.h"
#include "engine/optim/optimizer.h"
#include "engine/util/strings.h"
#include "samples/data.h"
#include "samples/models.h"

namespace ampcheck::samples {
namespace {

struct Sample {
  std::shared_ptr<nn::Module> model;
  Dataset data;
  std::int64_t batch;
  double lr;
  std::string description;
};

Sample make(const std::string& name, std::uint64_t seed) {
  Generator gen(seed);
  if (name == "mlp")
    return {std::make_shared<Mlp>(2, 64, 3, gen), spiral(100, 3, 0.2, seed + 1), 60, 1e-2,
            "Mlp 2-64-64-3 on the 3-class spiral (300 points)"};
  if (name == "cnn")
    return {std::make_shared<SmallCnn>(3, 4, gen, 8, 1), images(256, 4, 3, 16, seed + 1), 32, 3e-3,
            "SmallCnn (width 8, a residual block, BatchNorm) on 4-class stripe images 3x16x16 (256)"};
  if (name == "transformer")
    return {std::make_shared<TinyTransformer>(8, 8, 32, 2, 64, 2, gen), sequences(512, 8, 8, seed + 1), 64, 3e-3,
            "TinyTransformer (D 32, 2 heads, 1 layer) on 'does the first token recur' (512 sequences of 8)"};
  std::string msg = "unknown model \"" + name + "\"";
  const std::string_view best = closest(name, sample_names(), 3);
  if (!best.empty()) msg += " (did you mean \"" + std::string(best) + "\"?)";
  std::string list;
  for (std::string_view n : sample_names()) list += (list.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument(msg + "; samples: " + list);
}

}  // namespace

const std::vector<std::string_view>& sample_names() {
  static const std::vector<std::string_view> names = {"mlp", "cnn", "transformer"};
  return names;
}

RunResult run(const RunOptions& o) {
  if (o.steps <= 0) throw std::invalid_argument("--steps must be positive, got " + std::to_string(o.steps));
  if (o.batch < 0) throw std::invalid_argument("--batch must be positive, got " + std::to_string(o.batch));
  if (o.lr < 0) throw std::invalid_argument("--lr must be positive, got " + std::to_string(o.lr));
  Sample s = make(o.model, o.seed);
  RunResult r;
  r.description = s.description;
  r.parameters = s.model->parameter_count();
  r.batch = o.batch > 0 ? o.batch : s.batch;
  r.lr = o.lr > 0 ? o.lr : s.lr;

  optim::Adam opt(s.model->named_parameters(), r.lr);
  const bool amp_on = o.amp.level != amp::Level::O0;
  amp::decorate(*s.model, &opt, o.amp);
  const amp::Policy policy(o.amp);
  amp::GradScaler scaler(amp_on ? o.scaling : amp::ScalingOptions{amp::StaticScaling{1.0}});
  r.scaling = behaviour_name(scaler.options());
  const amp::Policy* active = amp_on ? &policy : nullptr;

  const std::int64_t n = s.data.size();
  for (std::int64_t step = 0; step < o.steps; ++step) {
    begin_step();
    const Dataset b = batch(s.data, (step * r.batch) % n, r.batch);
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast on(active);
      loss = cross_entropy((*s.model)(b.x), b.y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    r.losses.push_back(loss.item());
    end_step();
  }
  for (const amp::ScalerEvent& e : scaler.history()) r.skipped += e.skipped;
  r.final_scale = scaler.scale();

  s.model->eval();
  NoGradGuard no_grad;
  amp::Autocast on(active);
  const std::vector<double> logits = (*s.model)(s.data.x).to_f64();
  const std::vector<std::int64_t> labels = s.data.y.to_i64();
  const std::size_t classes = logits.size() / labels.size();
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    std::size_t best = 0;
    for (std::size_t c = 1; c < classes; ++c)
      if (logits[i * classes + c] > logits[i * classes + best]) best = c;
    correct += static_cast<std::int64_t>(best) == labels[i];
  }
  r.accuracy = static_cast<double>(correct) / static_cast<double>(labels.size());
  return r;
}

}  // namespace ampcheck::samples
