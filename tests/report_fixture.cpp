#include "tests/report_fixture.h"

#include <limits>

namespace ampcheck::testing {
namespace {

reports::Numerics numerics(int min_exponent, std::vector<std::int64_t> counts, std::int64_t zeros,
                           std::int64_t f16_overflow) {
  reports::Numerics n;
  n.histogram.min_exponent = min_exponent;
  n.histogram.counts = std::move(counts);
  n.histogram.zero = zeros;
  n.zeros = zeros;
  n.count = zeros;
  for (std::int64_t c : n.histogram.counts) n.count += c;
  n.tensors = 2;
  n.f16.overflow = f16_overflow;
  n.f16.underflow = 3;
  n.f16.subnormal = 5;
  n.bf16.subnormal = 1;
  n.min = -70000.0;
  n.max = 1.5;
  n.absmax = 70000.0;
  n.min_nonzero_abs = 0x1p-30;
  n.mean = -0.25;
  n.rms = 3.125;
  n.dynamic_range_log2 = 46.1;
  return n;
}

}  // namespace

reports::Report sample_report(bool with_bisect, bool with_compare) {
  reports::Report r;
  r.run.command = "run";
  r.run.model = "mlp";
  r.run.model_description = "Mlp 2-64-64-3 on the 3-class spiral (300 points)";
  r.run.parameters = 4547;
  r.run.level = "O2";
  r.run.dtype = "float16";
  r.run.device = "cpu";
  r.run.seed = 7;
  r.run.steps = 4;
  r.run.batch = 60;
  r.run.lr = 0.01;
  r.run.optimizer = "adam";
  r.run.inspect = "full";
  r.run.amp.semantics = "paddle";
  r.run.amp.config_file = "samples/configs/paddle_amp_configs.json";
  r.run.amp.custom_black_list = {"softmax"};
  r.run.amp.loss_scaling = "paddle dynamic";
  r.run.amp.init_loss_scaling = 32768;
  r.run.versions = {"0.1.0", "no CUDA (AMPCHECK_CUDA=OFF)", reports::kCpuPathsAlike};

  r.steps = {{0, 1.0986, 32768, true, true, {}, {}, {}, {}}, {1, 1.0986, 16384, false, false, {}, {}, {}, {}},
             {2, 0.9, 16384, false, false, {}, {}, {}, {}}, {3, 0.8125, 16384, false, false, {}, {}, {}, {}}};
  r.op_types = {{"linear", {9, 0, 3, 0, {}}}, {"linear_grad", {9, 0, 0, 0, {}}}, {"softmax", {0, 0, 4, 0, {}}}};
  r.inserted_casts = {{"float32", "float16", 12}};

  reports::OpInstance fc1;
  fc1.name = "fc1/linear#0";
  fc1.type = "linear";
  fc1.module = "fc1";
  fc1.phase = "forward";
  fc1.calls = 4;
  fc1.reason = "white";
  fc1.dtypes_in = {"float16", "float16", "float16"};
  fc1.compute = "float32";
  fc1.out = "float16";
  fc1.kernel_dtypes = {4, 0, 0, 0, {}};
  fc1.casts = {{0, "Input", "float32", "float16", 4}};
  fc1.kernels = {{"cpu:linear:f32", 4}};
  fc1.numerics = {{"out", numerics(-30, {1, 0, 4, 10, 20, 9, 2}, 6, 2)}};
  fc1.local_error = reports::LocalError{4, 0, 2.4e-4, 2.1e-4, 4.9e-4, 2.5e-4, 2, 0.0078125};
  fc1.range_loss = reports::RangeLoss{3, 2, 0, "overflow", 70000.0};

  reports::OpInstance sm;
  sm.name = "/softmax#0";
  sm.type = "softmax";
  sm.module = "";
  sm.phase = "forward";
  sm.calls = 4;
  sm.reason = "custom_black";
  sm.dtypes_in = {"float32"};
  sm.compute = "float32";
  sm.out = "float32";
  sm.kernel_dtypes = {0, 0, 4, 0, {}};
  sm.casts = {{0, "X", "float16", "float32", 4}};
  sm.kernels = {{"cpu:softmax:f32", 4}};
  sm.numerics = {{"out", numerics(-12, {3, 7, 50}, 0, 0)}};

  reports::OpInstance fc1b = fc1;
  fc1b.name = "fc1/linear_grad#0";
  fc1b.phase = "backward";
  fc1b.local_error.reset();
  fc1b.numerics = {{"grad0", numerics(-40, {2, 2}, 1, 0)}, {"grad1", numerics(-20, {8}, 0, 0)}};
  fc1b.casts.clear();
  r.ops = {fc1, sm, fc1b};

  r.tensors = {{"param:fc1.weight", numerics(-8, {5, 30, 40}, 0, 0)}};
  r.swamping = {{"fc1.weight", 4, 0.125}};

  reports::NanEvent producer;
  producer.step = 0;
  producer.phase = "forward";
  producer.op = "linear";
  producer.module = "fc1";
  producer.inputs = {{"input 0", "float16", {60, 2}, 0, 0, 0, -3.5, 60000.0, 60000.0},
                     {"input 1", "float16", {64, 2}, 0, 0, 0, std::numeric_limits<double>::quiet_NaN(),
                      std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()}};
  producer.out_pos_inf = 12;
  // fp16's largest finite value, 65504: the linear's own result overflowed it.
  producer.lost = {{"", "linear", "fc1", "forward", 0, false, "overflow", "float16", 70000.0, 12, 65504.0}};
  r.nonfinite.producer = producer;
  reports::NanEvent second;
  second.step = 2;
  second.phase = "forward";
  second.op = "log";
  second.module = "head";
  second.inputs = {{"input 0", "float32", {60, 3}, 0, 0, 0, 0.0, 0.75, 0.75}};
  second.out_neg_inf = 5;
  // 2^-24, fp16's smallest subnormal: a gate of 3e-9 rounds to 0 there.
  second.lost = {{"input 0", "sigmoid", "gate", "forward", 2, false, "underflow", "float16", 3e-9, 5, 0x1p-24}};
  r.nonfinite.producers = {producer, second};
  r.nonfinite.propagator_events = 3;
  r.nonfinite.propagators = {{"relu", 2}, {"softmax", 1}};
  r.nonfinite.failures = {{"forward_non_finite", 0, "linear in fc1 made +Inf from finite inputs"}};
  r.nonfinite.updates = 4;
  r.nonfinite.skipped = 1;
  r.nonfinite.absorbed = 0;
  r.nonfinite.events_checked = 120;
  r.nonfinite.intended = {{"masked_fill", "attn", 4, 96, {"softmax"}, "-inf mask: softmax maps it to 0"}};
  r.nonfinite.probing = reports::ScalerProbing{1, 1, 1, 32768.0, 16384.0, 16384.0, false};

  r.summary.initial_loss = 1.0986;
  r.summary.final_loss = 0.8125;
  r.summary.accuracy = 0.64;
  r.summary.skipped_steps = 1;
  r.summary.final_loss_scale = 16384;
  r.summary.low_precision_calls = 18;
  r.summary.total_calls = 25;
  r.summary.verdict = "failed";
  r.summary.verdict_text = "FAILED: linear in fc1 made +Inf from finite inputs";

  if (with_bisect) {
    reports::Bisect b;
    b.granularity = "type";
    b.producer = producer;
    b.candidates = {"linear", "relu", "softmax"};
    b.found = true;
    b.culprits = {"linear"};
    b.suggested_black_list = {"linear"};
    b.suggested_fp32_modules = {"fc1"};
    b.max_skipped_fraction = 0.05;
    b.loss_tolerance = 0;
    b.runs = 3;
    b.trials = {{1, {}, false, "non-finite forward value", 1, std::numeric_limits<double>::infinity()},
                {2, {"linear"}, true, "", 0, 0.81},
                {3, {"relu", "softmax"}, false, "non-finite forward value", 1, std::numeric_limits<double>::quiet_NaN()}};
    b.suggestion = {"{\n  \"amp\": {\"custom_black_list\": [\"linear\"]}\n}\n",
                    "with paddle.amp.auto_cast(custom_black_list=['linear']):\n",
                    "strategy.amp_configs = {'custom_black_list': ['linear']}\n",
                    "with torch.autocast('cuda', enabled=False):\n    y = fc1(x.float())\n"};
    r.bisect = b;
  }
  if (with_compare) {
    reports::Compare c;
    c.reference = "O0";
    c.runs = {{"O0", {1.0986, 1.0, 0.9, 0.8}, 0.8, 0.66, 0},
              {"O2", {1.0986, 1.01, 0.91, 0.8125}, 0.8125, 0.64, 1}};
    c.ops = {{"fc1/linear#0", "linear", "fc1", {{"O2", 3e-4, 9e-4, 3, 2.5}}},
             {"/softmax#0", "softmax", "", {{"O2", 1e-5, 2e-5, 1, 1.1}}}};
    c.fastest_growing = {"fc1/linear#0", "/softmax#0"};
    r.compare = c;
  }
  return r;
}

reports::Report gpu_report() {
  reports::Report r = sample_report(false, false);
  r.run.device = "cuda";
  for (reports::OpInstance& op : r.ops) op.gpu_kernels.emplace();
  r.ops[0].gpu_kernels = std::vector<reports::GpuKernel>{
      {"nvjet_sm90_hss_64x8_64x16_1x4_h_bz_TNT", {4, 1, 1}, {128, 1, 1}, 4, 40'000, 9'000, 11'000, "f16", "f32", "yes",
       "gemm"},
      {"void ampcheck::kernels::cuda::(anonymous namespace)::finish_kernel<float>(void const*)", {8, 1, 1}, {256, 1, 1},
       4, 8'000, 2'000, 2'000, "unknown", "unknown", "no", "elementwise"}};
  reports::Kernels& k = r.kernels.emplace();
  k.traced = true;
  k.kernels = 60;
  k.memcpys = 8;
  k.memsets = 2;
  k.attributed = 48;
  k.inspector = 12;
  k.unattributed = 10;
  k.instances_checked = 3;
  k.kernels_unread = 1;
  k.by_type = {{"conv2d", 8, 200'000, 180'000, 0, 180'000},
               {"linear", 8, 48'000, 40'000, 40'000, 0},
               {"cast (inserted by AMP)", 4, 6'000, 0, 0, 0}};
  k.findings = {
      {"warning", "cuda_cores", "stem.conv/conv2d#0", "conv2d", "stem.conv", "forward", "float16",
       "void implicit_convolve_sgemm<__half, __half, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int)", "f16", "f32", "no", 4,
       "likely because C_in=3 is not a multiple of 8",
       "stem.conv/conv2d#0 (forward): the policy ran it in float16, but its kernel implicit_convolve_sgemm<...> ran on "
       "CUDA cores [4 launches]: likely because C_in=3 is not a multiple of 8"},
      {"note", "wider_kernel", "dw/conv2d#0", "conv2d", "dw", "forward", "float16",
       "sm90_xmma_depthwise_convolution_fprop_tiling_f16f16_f32f32_f32", "f32", "f32", "unknown", 4,
       "a depthwise convolution (C_in=64 C_out=64 groups=64)", "dw/conv2d#0 (forward): depthwise, f32 multiplies"}};
  k.outside = {{"void ampcheck::kernels::cuda::(anonymous namespace)::adam_kernel<float>(void*)", "step", 4, 12'000,
                "elementwise"},
               {"void ampcheck::kernels::cuda::(anonymous namespace)::stats_blocks(void const*)", "inspector", 12, 9'000,
                "reduction"}};
  return r;
}

}  // namespace ampcheck::testing
