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
  if (name == "overflow")
    return {std::make_shared<OverflowMlp>(2, 32, 3, gen), spiral(100, 3, 0.2, seed + 1), 60, 1e-2,
            "OverflowMlp 2-32-3 with a planted fp16 overflow (square of 300x activations) on the spiral"};
  std::string msg = "unknown model \"" + name + "\"";
  const std::string_view best = closest(name, sample_names(), 3);
  if (!best.empty()) msg += " (did you mean \"" + std::string(best) + "\"?)";
  std::string list;
  for (std::string_view n : sample_names()) list += (list.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument(msg + "; samples: " + list);
}

const RunOptions& checked(const RunOptions& o) {
  if (o.steps <= 0) throw std::invalid_argument("--steps must be positive, got " + std::to_string(o.steps));
  if (o.batch < 0) throw std::invalid_argument("--batch must be positive, got " + std::to_string(o.batch));
  if (o.lr < 0) throw std::invalid_argument("--lr must be positive, got " + std::to_string(o.lr));
  return o;
}

}  // namespace

const std::vector<std::string_view>& sample_names() {
  static const std::vector<std::string_view> names = {"mlp", "cnn", "transformer", "overflow"};
  return names;
}

struct Trainer::State {
  explicit State(const RunOptions& o)
      : options(checked(o)),
        sample(make(o.model, o.seed)),
        optimizer(sample.model->named_parameters(), o.lr > 0 ? o.lr : sample.lr),
        policy(o.amp),
        scaler(o.amp.level != amp::Level::O0 ? o.scaling : amp::ScalingOptions{amp::StaticScaling{1.0}}) {
    amp::decorate(*sample.model, &optimizer, o.amp);
    active = o.amp.level != amp::Level::O0 ? &policy : nullptr;
    result.description = sample.description;
    result.parameters = sample.model->parameter_count();
    result.batch = o.batch > 0 ? o.batch : sample.batch;
    result.lr = o.lr > 0 ? o.lr : sample.lr;
    result.scaling = behaviour_name(scaler.options());
    result.final_scale = scaler.scale();
  }
  RunOptions options;
  Sample sample;
  optim::Adam optimizer;
  amp::Policy policy;
  amp::GradScaler scaler;
  const amp::Policy* active = nullptr;
  RunResult result;
};

Trainer::Trainer(const RunOptions& options) : s_(std::make_unique<State>(options)) {}
Trainer::~Trainer() = default;

const RunResult& Trainer::result() const { return s_->result; }

StepResult Trainer::step() {
  State& s = *s_;
  RunResult& r = s.result;
  const std::int64_t n = s.sample.data.size();
  const std::int64_t step = static_cast<std::int64_t>(r.steps.size());
  begin_step(step + 1);  // steps count from 1, per run
  const Dataset b = batch(s.sample.data, (step * r.batch) % n, r.batch);
  s.optimizer.zero_grad();
  Tensor loss;
  {
    amp::Autocast on(s.active);
    loss = cross_entropy((*s.sample.model)(b.x), b.y);
  }
  StepResult out;
  out.loss_scale = s.scaler.scale();
  s.scaler.scale(loss).backward();
  s.scaler.step(s.optimizer);
  s.scaler.update();
  out.loss = loss.item();
  const auto& history = s.scaler.history();
  if (!history.empty() && history.back().step == step + 1) {
    out.found_inf = history.back().found_inf;
    out.skipped = history.back().skipped;
  }
  end_step();
  r.steps.push_back(out);
  r.skipped += out.skipped;
  r.final_scale = s.scaler.scale();
  return out;
}

double Trainer::evaluate() {
  State& s = *s_;
  s.sample.model->eval();
  NoGradGuard no_grad;
  amp::Autocast on(s.active);
  const std::vector<double> logits = (*s.sample.model)(s.sample.data.x).to_f64();
  const std::vector<std::int64_t> labels = s.sample.data.y.to_i64();
  const std::size_t classes = logits.size() / labels.size();
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    std::size_t best = 0;
    for (std::size_t c = 1; c < classes; ++c)
      if (logits[i * classes + c] > logits[i * classes + best]) best = c;
    correct += static_cast<std::int64_t>(best) == labels[i];
  }
  s.result.accuracy = static_cast<double>(correct) / static_cast<double>(labels.size());
  return s.result.accuracy;
}

RunResult run(const RunOptions& options) {
  Trainer t(options);
  for (std::int64_t i = 0; i < options.steps; ++i) t.step();
  t.evaluate();
  return t.result();
}

}  // namespace ampcheck::samples
