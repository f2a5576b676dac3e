#include "models/runner.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include "engine/amp/decorate.h"
#include "engine/dist/data_parallel.h"
#include "engine/hooks.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "models/data.h"
#include "models/onnx_model.h"

namespace ampcheck::models {
namespace {

const RunOptions& checked(const RunOptions& o) {
  if (o.steps < 0) throw std::invalid_argument("--steps must be positive, got " + std::to_string(o.steps));
  if (o.batch < 0) throw std::invalid_argument("--batch must be positive, got " + std::to_string(o.batch));
  if (o.lr < 0) throw std::invalid_argument("--lr must be positive, got " + std::to_string(o.lr));
  return o;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainSpec& t, const nn::Module& model, double lr) {
  if (t.optimizer == "sgd") {
    optim::SGD::Options o;
    o.momentum = t.momentum;
    o.weight_decay = t.weight_decay;
    return std::make_unique<optim::SGD>(model.named_parameters(), lr, o);
  }
  optim::Adam::Options o;
  o.weight_decay = t.weight_decay;
  o.decoupled = t.optimizer == "adamw";
  return std::make_unique<optim::Adam>(model.named_parameters(), lr, o);
}

Tensor loss_of(const LossSpec& l, const Tensor& output, const Tensor& labels) {
  Tensor loss;
  if (l.kind == "mse") {
    const std::vector<std::int64_t> y = labels.to_i64();
    const std::int64_t classes = output.size(1);
    std::vector<float> onehot(y.size() * static_cast<std::size_t>(classes), 0.0f);
    for (std::size_t i = 0; i < y.size(); ++i) onehot[i * static_cast<std::size_t>(classes) + static_cast<std::size_t>(y[i])] = 1.0f;
    loss = mse_loss(output, Tensor::from(onehot, output.shape()).to(output.device()));
  } else {
    loss = cross_entropy(output, labels, l.label_smoothing);
  }
  return loss;
}

ModelFile loaded(const RunOptions& o) {
  ModelFile f = load_model(o.model, o.catalog);
  apply(f, o.overrides);
  return f;
}

}  // namespace

struct Trainer::State {
  explicit State(const RunOptions& o) try
      : options(checked(o)),
        file(loaded(o)),
        data(make_data(file, o.seed + 1)),
        policy(o.amp),
        scaler(o.amp.level != amp::Level::O0 ? o.scaling : amp::ScalingOptions{amp::StaticScaling{1.0}}) {
    Generator gen(o.seed);
    try {
      model = build(file, data, gen);
    } catch (const ModelFileError& e) {
      // The model's first forward on the data's first rows: a model and a data file that do
      // not fit each other (token ids into a linear layer) are both named, either may be the
      // one to change.
      if (file.data.file.empty()) throw;
      throw ModelFileError(std::string(e.what()) + " (on the data of " + file.data.file + ")");
    }
    if (model->parameter_count() == 0)
      throw ModelFileError(file.source + ": the model has no trainable parameter (no floating-point weight): nothing "
                           "to train; run its forward with `ampcheck infer`, or export it with its weights as "
                           "initializers (torch.onnx.export's default; not do_constant_folding of weights into Constant nodes)");
    // Built on the CPU (the same initial values on every device), then moved whole: the
    // optimizer and decorate() below see the parameters where they will train.
    model->to(o.device);
    data.x.move_to_(o.device);
    data.y.move_to_(o.device);
    for (Tensor& t : data.more) t.move_to_(o.device);
    if (o.fp8) enable_fp8(*o.fp8, o.fp8_keep, o.fp8_keep_from);
    result.lr = o.lr > 0 ? o.lr : file.train.lr;
    optimizer = make_optimizer(file.train, *model, result.lr);
    amp::decorate(*model, optimizer.get(), o.amp);
    active = o.amp.level != amp::Level::O0 ? &policy : nullptr;
    result.description = file.description.empty() ? file.name : file.description;
    result.parameters = model->parameter_count();
    result.steps_asked = o.steps > 0 ? o.steps : file.train.steps;
    result.optimizer = file.train.optimizer;
    result.scaling = behaviour_name(scaler.options());
    result.final_scale = scaler.scale();
    result.world = dist::world().size();
    if (const std::optional<std::int64_t> fixed = fixed_batch(file)) {
      // A batch size the export fixed is the batch size: every forward (each rank's) runs
      // exactly that many rows, taken round the end of the data where it runs out.
      const std::int64_t global = *fixed * result.world;
      const std::string input = file.onnx_graph->inputs.empty() ? "input" : file.onnx_graph->inputs.front().name;
      if (o.batch > 0 && o.batch != global)
        throw ModelFileError(file.source + ": --batch " + std::to_string(o.batch) + " contradicts the model: its input \"" +
                             input + "\" has a fixed batch size of " + std::to_string(*fixed) +
                             (result.world > 1 ? " rows per rank (" + std::to_string(global) + " over " +
                                                     std::to_string(result.world) + " ranks)"
                                               : "") +
                             "; leave --batch out (or give " + std::to_string(global) + "), or " +
                             dynamic_batch_hint(file, input));
      if (data.size() < global)
        throw ModelFileError(file.source + ": the model's input \"" + input + "\" has a fixed batch size of " +
                             std::to_string(*fixed) + (result.world > 1 ? " per rank" : "") + ", but the data has " +
                             std::to_string(data.size()) + " rows: give at least " + std::to_string(global));
      result.batch = global;
      result.fixed_batch = true;
    } else {
      result.batch = std::min(o.batch > 0 ? o.batch : file.train.batch, data.size());
    }
    if (result.world > 1 && std::min(result.batch, data.size()) < result.world)
      throw std::invalid_argument("--batch " + std::to_string(result.batch) + " is smaller than the " +
                                  std::to_string(result.world) + " ranks: each needs at least one row of every batch");
  } catch (const OutOfMemory& e) {
    // A size the model file or the data asks for (a layer, a generator's sample count): the
    // file named, as every other error of the user's input names it.
    throw OutOfMemory(o.model + ": " + e.what());
  }
  // The model's linear layers in fp8 but those kept or of sizes fp8 GEMMs do not take.
  void enable_fp8(const amp::Fp8Recipe& recipe, const std::vector<std::string>& keep,
                  const std::vector<std::string>& keep_from) {
    for (const auto& entry : model->named_modules()) {
      const std::string& path = entry.first;
      auto* linear = dynamic_cast<nn::Linear*>(entry.second);
      if (linear == nullptr) continue;
      Fp8Layer l{path, false, ""};
      const bool kept = std::any_of(keep.begin(), keep.end(), [&](const std::string& k) {
        return path == k || (path.size() > k.size() && path.compare(0, k.size(), k) == 0 && path[k.size()] == '.');
      });
      const std::int64_t out = linear->weight.size(0), in = linear->weight.size(1);
      if (kept) {
        l.kept = "kept by name";  // --fp8-keep, or the "fp8" block's "keep"
      } else if (const std::int64_t multiple = nn::fp8_size_multiple(recipe); in % multiple != 0 || out % multiple != 0) {
        l.kept = "[" + std::to_string(out) + ", " + std::to_string(in) + "]: not multiples of " + std::to_string(multiple);
      } else {
        linear->enable_fp8(recipe);
        l.fp8 = true;
        fp8_linears.push_back(linear);
      }
      result.fp8_layers.push_back(l);
    }
    for (std::size_t i = 0; i < keep.size(); ++i) {
      const std::string& k = keep[i];
      if (std::none_of(result.fp8_layers.begin(), result.fp8_layers.end(), [&](const Fp8Layer& l) {
            return l.layer == k || l.layer.rfind(k + ".", 0) == 0;
          }))
        throw std::invalid_argument((i < keep_from.size() ? keep_from[i] : std::string("--fp8-keep")) + " " +
                                    (k.size() <= 100 ? k : k.substr(0, 60) + "... (" + std::to_string(k.size()) + " characters)") +
                                    ": no linear layer of the model is named so or lies under it");
    }
  }
  // The end of a step in fp8: every layer's amaxes (reduced over the ranks' group under
  // mpirun), then each layer's scale update; what each rank used, for the consensus check.
  std::vector<Fp8ScaleRecord> update_fp8_scales(dist::Communicator& comm) {
    std::vector<float> amax;
    for (const nn::Linear* l : fp8_linears)
      for (const float a : l->step_amaxes()) amax.push_back(a);
    const auto* delayed = std::get_if<amp::DelayedScaling>(&*options.fp8);
    if (delayed == nullptr) {  // current scaling: the step's amaxes cleared, no record to agree on
      for (nn::Linear* l : fp8_linears) l->update_scales();
      return {};
    }
    const bool reduce = comm.size() > 1 && delayed->reduce_amax;
    if (reduce) comm.all_reduce_max(amax.data(), static_cast<std::int64_t>(amax.size()), options.fp8_amax_group);
    std::vector<Fp8ScaleRecord> records;
    for (std::size_t i = 0; i < fp8_linears.size(); ++i) {
      nn::Linear& l = *fp8_linears[i];
      const std::array<float, 3> mine = {amax[3 * i], amax[3 * i + 1], amax[3 * i + 2]};
      const auto done = l.update_scales(reduce ? std::optional<std::array<float, 3>>(mine) : std::nullopt);
      for (std::size_t r = 0; r < 3; ++r)
        records.push_back({l.path() + " " + std::string(amp::role_name(static_cast<amp::Fp8Role>(r))),
                           done[r].step_amax, done[r].scale_after});
    }
    return records;
  }

  RunOptions options;
  ModelFile file;
  Dataset data;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  amp::Policy policy;
  amp::GradScaler scaler;
  const amp::Policy* active = nullptr;
  RunResult result;
  std::vector<nn::Linear*> fp8_linears;  // the layers running in fp8, in model order
};

Trainer::Trainer(const RunOptions& options) : s_(std::make_unique<State>(options)) {}
Trainer::~Trainer() = default;

const RunResult& Trainer::result() const { return s_->result; }

StepResult Trainer::step() {
  State& s = *s_;
  RunResult& r = s.result;
  const std::int64_t n = s.data.size();
  const std::int64_t step = static_cast<std::int64_t>(r.steps.size());
  begin_step(step + 1);  // steps count from 1, per run
  dist::Communicator& comm = dist::world();
  const Dataset global = r.fixed_batch ? batch_around(s.data, (step * r.batch) % n, r.batch)
                                       : batch(s.data, (step * r.batch) % n, r.batch);
  // Data parallel: this rank's shard of the global batch (the same rows a single process
  // would train on, split in rank order), its loss weighted by its share so that the
  // average over the ranks is the global batch's mean.
  const std::int64_t len = global.size();
  const std::int64_t lo = len * comm.rank() / comm.size(), hi = len * (comm.rank() + 1) / comm.size();
  const Dataset b = comm.size() > 1 ? batch(global, lo, hi - lo) : global;
  s.optimizer->zero_grad();
  Tensor loss;
  {
    amp::Autocast on(s.active);
    if (!b.more.empty()) set_side_inputs(*s.model, b.more);
    loss = loss_of(s.file.loss, (*s.model)(b.x), b.y);
  }
  // The loss weight outside autocast: the loss stays fp32 whatever the level.
  if (s.file.loss.weight != 1) loss = loss * s.file.loss.weight;
  // A model whose output no weight reaches trains nothing (a constant head, an export whose
  // weights were folded into constants): said as the model's, not backward()'s, error.
  if (!loss.requires_grad())
    throw ModelFileError(s.file.source + ": the loss does not depend on any trainable parameter (the output " +
                         (s.file.output.empty() ? std::string("the model gives") : "\"" + s.file.output + "\"") +
                         " is computed without the model's weights): nothing to train; run its forward with "
                         "`ampcheck infer`, or export the model with its weights as initializers");
  StepResult out;
  out.loss_scale = s.scaler.scale();
  if (comm.size() == 1) {
    s.scaler.scale(loss).backward();
    s.scaler.step(*s.optimizer);
    s.scaler.update();
    if (!s.fp8_linears.empty()) s.update_fp8_scales(comm);
    out.loss = loss.item();
  } else {
    const double share = static_cast<double>(hi - lo) * comm.size() / static_cast<double>(len);
    s.scaler.scale(share == 1 ? loss : loss * share).backward();
    dist::DataParallelOptions dp;
    dp.reduce_found_inf = s.options.reduce_found_inf;
    dp.reduce_dtype = s.options.reduce_dtype;
    const double local = loss.item();
    r.data_parallel.push_back(
        dist::data_parallel_update(s.scaler, *s.optimizer, comm, dp, step + 1, local, hi - lo));
    s.scaler.update();
    if (!s.fp8_linears.empty()) r.data_parallel.back().fp8 = s.update_fp8_scales(comm);
    double global_loss = local * static_cast<double>(hi - lo) / static_cast<double>(len);
    comm.all_reduce_sum(&global_loss, 1);
    out.loss = global_loss;
  }
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
  s.model->eval();
  NoGradGuard no_grad;
  amp::Autocast on(s.active);
  std::vector<double> logits;
  if (!s.result.fixed_batch) {
    if (!s.data.more.empty()) set_side_inputs(*s.model, s.data.more);
    logits = (*s.model)(s.data.x).to_f64();
  } else {
    // In forwards of the fixed size; the last one's rows past the data's end (taken from
    // its start) are left out.
    const std::int64_t n = s.data.size(), per = s.result.batch / s.result.world;
    for (std::int64_t start = 0; start < n; start += per) {
      const Dataset b = batch_around(s.data, start, per);
      if (!b.more.empty()) set_side_inputs(*s.model, b.more);
      const std::vector<double> out = (*s.model)(b.x).to_f64();
      const std::size_t keep = out.size() / static_cast<std::size_t>(per) * static_cast<std::size_t>(std::min(per, n - start));
      logits.insert(logits.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(keep));
    }
  }
  const std::vector<std::int64_t> labels = s.data.y.to_i64();
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
  for (std::int64_t i = 0; i < t.result().steps_asked; ++i) t.step();
  t.evaluate();
  return t.result();
}

}  // namespace ampcheck::models
