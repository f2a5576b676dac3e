#include "inspector/kernel_check.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/dtype/dtype.h"

namespace ampcheck::inspector {
namespace {

// Below this many multiply-adds per call, a library's heuristic may well prefer a
// CUDA-core kernel: the work does not fill a tensor-core tile's worth of the GPU.
constexpr double kSmallProblem = 1 << 20;

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (const std::int64_t d : s) n *= d;
  return n;
}

std::string long_name(DType d) { return std::string(info(d).long_name); }

bool low(DType d) { return d == DType::f16 || d == DType::bf16; }

// The dtype the engine ran an instance in: the one all its calls ran in.
std::optional<DType> expected_dtype(const InstanceStats& s) {
  const DtypeCalls& c = s.kernel_dtypes;
  if (c.other != 0) return std::nullopt;
  if (c.fp16 != 0 && c.bf16 == 0 && c.fp32 == 0) return DType::f16;
  if (c.bf16 != 0 && c.fp16 == 0 && c.fp32 == 0) return DType::bf16;
  if (c.fp32 != 0 && c.fp16 == 0 && c.bf16 == 0) return DType::f32;
  return std::nullopt;  // calls in several dtypes (a bisection's trials): no one answer
}

KernelPrecision precision_of(DType d) {
  switch (d) {
    case DType::f16: return KernelPrecision::f16;
    case DType::bf16: return KernelPrecision::bf16;
    case DType::f32: return KernelPrecision::f32;
    case DType::f64: return KernelPrecision::f64;
    default: return KernelPrecision::unknown;
  }
}

// "why it is likely": the shape's unaligned dimensions, else a small problem, else "".
std::string shape_reason(const MatrixShape& m, bool channels) {
  if (!m.unaligned.empty()) {
    std::string dims;
    for (const std::string& u : m.unaligned) dims += (dims.empty() ? "" : ", ") + u;
    return fmt::format("{} {} not a multiple of 8: the libraries' float16/bfloat16 tensor-core kernels want {} in "
                       "multiples of 8 (16 bytes); pad {} to a multiple of 8",
                       dims, m.unaligned.size() == 1 ? "is" : "are",
                       channels ? "channels" : "the inner dimensions", m.unaligned.size() == 1 ? "it" : "them");
  }
  if (m.work > 0 && m.work < kSmallProblem)
    return fmt::format("a small problem ({} multiply-adds, {}): the library's heuristic picked a CUDA-core kernel; "
                       "a larger batch or layer would go to tensor cores",
                       static_cast<std::int64_t>(m.work), m.dims);
  return {};
}

std::string with_shape(const std::string& what, const MatrixShape& m, bool channels) {
  const std::string why = shape_reason(m, channels);
  if (!why.empty()) return what + "; likely because " + why;
  return what + (m.dims.empty() ? "" : " (" + m.dims + ")");
}

// What the recorded inputs say: an op of the policy's fp16/bf16 list whose inputs were
// float32 did not go through autocast's cast at all.
std::string inputs_reason(const CheckedInstance& s) {
  if (!s.recorded_inputs || !s.expected || !low(*s.expected) || low(*s.recorded_inputs)) return {};
  return fmt::format("its inputs were {} (Input type: {}): the op ran outside autocast, or on {} tensors autocast "
                     "does not cast (a region with autocast disabled, a .float() the model asks for); ",
                     long_name(*s.recorded_inputs), s.recorded_types, long_name(*s.recorded_inputs));
}

// The algorithm a convolution's kernels name: cuDNN's FFT and Winograd paths multiply
// transforms in float32 on CUDA cores whatever the data's type.
std::string algorithm_reason(const CheckedInstance& s) {
  bool fft = false, winograd = false;
  for (const CheckedKernel& k : s.kernels) {
    fft = fft || k.name.find("fft") != std::string::npos || k.name.find("gcgemm") != std::string::npos;
    winograd = winograd || k.name.find("winograd") != std::string::npos;
  }
  if (fft) return "cuDNN chose an FFT convolution (fft2d_*, a complex gcgemm): its products run in float32 on CUDA cores; ";
  if (winograd) return "cuDNN chose a Winograd convolution: its transforms and products run on CUDA cores; ";
  return {};
}

}  // namespace

const char* kernel_problem_name(KernelProblem p) {
  switch (p) {
    case KernelProblem::wider_kernel: return "wider_kernel";
    case KernelProblem::tf32_kernel: return "tf32_kernel";
    case KernelProblem::other_low_precision: return "other_low_precision";
    case KernelProblem::cuda_cores: return "cuda_cores";
    case KernelProblem::narrower_kernel: return "narrower_kernel";
  }
  return "?";
}

const char* severity_name(Severity s) { return s == Severity::warning ? "warning" : "note"; }

std::int64_t KernelCheck::warnings() const {
  return std::count_if(findings.begin(), findings.end(),
                       [](const KernelFinding& f) { return f.severity == Severity::warning; });
}

std::string KernelFinding::text() const {
  const std::string ran =
      problem == KernelProblem::cuda_cores
          ? fmt::format("ran on CUDA cores ({} multiplies, {} accumulation), not tensor cores", precision_name(cls.input),
                        precision_name(cls.accumulate))
          : fmt::format("multiplied in {} ({} accumulation{})", precision_name(cls.input),
                        precision_name(cls.accumulate),
                        cls.tensor_cores == TensorCores::yes  ? ", tensor cores"
                        : cls.tensor_cores == TensorCores::no ? ", CUDA cores"
                                                              : "");
  // A profile's instance names carry their phase already ("aten::mm#3 (backward)").
  const std::string phase_label = " (" + std::string(phase_name(phase)) + ")";
  const bool labelled = instance.size() >= phase_label.size() &&
                        instance.compare(instance.size() - phase_label.size(), phase_label.size(), phase_label) == 0;
  return fmt::format("{}{}: the policy {} {}, but its kernel {} {} [{} launch{}]: {}", instance,
                     labelled ? std::string() : phase_label,
                     intended ? "puts it in" : "ran it in", long_name(expected), kernel_label(kernel), ran, launches,
                     launches == 1 ? "" : "es", reason);
}

MatrixShape matrix_shape(Op op, const std::vector<Shape>& shapes, const Shape& out_spatial) {
  MatrixShape m;
  auto gemm = [&](std::int64_t M, std::int64_t N, std::int64_t K) {
    m.dims = fmt::format("M={} N={} K={}", M, N, K);
    m.vector = M == 1 || N == 1;
    m.work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
    // Row-major A [M, K], B [K, N] or [N, K], C [M, N]: K and N are the leading
    // dimensions; a backward pass reduces over M too (dW = dY^T X).
    if (K % 8 != 0) m.unaligned.push_back(fmt::format("K={}", K));
    if (N % 8 != 0) m.unaligned.push_back(fmt::format("N={}", N));
    if (M % 8 != 0 && M > 1) m.unaligned.push_back(fmt::format("M={}", M));
  };
  switch (op) {
    case Op::linear:
    case Op::fp8_linear: {
      if (shapes.size() < 2 || shapes[0].empty() || shapes[1].size() != 2) return m;
      const std::int64_t K = shapes[0].back(), N = shapes[1][0];
      gemm(K > 0 ? numel(shapes[0]) / K : 0, N, K);
      return m;
    }
    case Op::matmul:
    case Op::bmm: {
      if (shapes.size() < 2 || shapes[0].empty() || shapes[1].empty()) return m;
      const Shape& a = shapes[0];
      const Shape& b = shapes[1];
      const std::int64_t M = a.size() == 1 ? 1 : a[a.size() - 2], K = a.back();
      const std::int64_t N = b.size() == 1 ? 1 : b.back();
      std::int64_t batch = 1;
      for (std::size_t i = 0; i + 2 < a.size(); ++i) batch *= a[i];
      gemm(M, N, K);
      m.work *= static_cast<double>(batch);
      return m;
    }
    case Op::scaled_dot_product_attention: {
      // Q K^T [T_q, T_k] over E, then P V [T_q, E_v] over T_k, per batch-head.
      if (shapes.size() < 3 || shapes[0].size() < 2 || shapes[1].size() < 2 || shapes[2].size() < 2) return m;
      const Shape& q = shapes[0];
      const std::int64_t tq = q[q.size() - 2], e = q.back(), tk = shapes[1][shapes[1].size() - 2];
      const std::int64_t ev = shapes[2].back();
      std::int64_t batch = 1;
      for (std::size_t i = 0; i + 2 < q.size(); ++i) batch *= q[i];
      gemm(tq, tk, e);
      m.work = static_cast<double>(batch) * static_cast<double>(tq) * static_cast<double>(tk) *
               static_cast<double>(e + ev);
      return m;
    }
    case Op::conv2d: {
      if (shapes.size() < 2 || shapes[0].size() != 4 || shapes[1].size() != 4) return m;
      const Shape& x = shapes[0];
      const Shape& w = shapes[1];
      const std::int64_t c_in = x[1], c_out = w[0], per_group = w[1];
      const std::int64_t groups = per_group > 0 ? c_in / per_group : 1;
      m.dims = fmt::format("C_in={} C_out={}{}", c_in, c_out, groups > 1 ? fmt::format(" groups={}", groups) : "");
      m.depthwise = groups > 1 && per_group == 1;
      const std::int64_t out_pixels = out_spatial.size() == 2 ? out_spatial[0] * out_spatial[1] : x[2] * x[3];
      m.work = static_cast<double>(x[0]) * static_cast<double>(c_out) * static_cast<double>(per_group) *
               static_cast<double>(w[2] * w[3]) * static_cast<double>(out_pixels);
      if (!m.depthwise) {
        if (per_group % 8 != 0) m.unaligned.push_back(fmt::format("C_in={}", per_group));
        if ((c_out / std::max<std::int64_t>(groups, 1)) % 8 != 0) m.unaligned.push_back(fmt::format("C_out={}", c_out));
      }
      return m;
    }
    default: return m;
  }
}

std::vector<CheckedInstance> checked_instances(const std::vector<InstanceStats>& instances) {
  std::vector<CheckedInstance> out;
  out.reserve(instances.size());
  for (const InstanceStats& s : instances) {
    CheckedInstance c;
    c.name = s.name();
    c.type = std::string(op_name(s.op)) + (s.phase == Phase::backward ? "_grad" : "");
    c.op = s.op;
    c.phase = s.phase;
    c.module = s.module;
    c.expected = expected_dtype(s);
    c.reason = s.reason;
    c.shapes = s.shapes;
    for (const GpuKernelStats& g : s.gpu_kernels) c.kernels.push_back({g.name, g.cls, g.launches, g.total_ns});
    out.push_back(std::move(c));
  }
  return out;
}

KernelCheck check_kernels(const OpTrace& trace) { return check_kernels(checked_instances(trace.instances())); }

KernelCheck check_kernels(const std::vector<InstanceStats>& instances) {
  return check_kernels(checked_instances(instances));
}

KernelCheck check_kernels(const std::vector<CheckedInstance>& instances) {
  KernelCheck out;
  std::vector<KernelFinding> notes;
  for (const CheckedInstance& s : instances) {
    if (!s.expected) continue;
    const DType expected = *s.expected;
    const MatrixShape shape = matrix_shape(s.op, s.shapes);
    const bool channels = s.op == Op::conv2d;
    const std::string inputs = inputs_reason(s);
    // A profile's op with no input types recorded: its tensors' dtype is not seen.
    const bool unseen = s.intended && s.recorded_types.empty();
    const std::string algorithm = channels ? algorithm_reason(s) : std::string();
    bool checked = false;
    for (const CheckedKernel& g : s.kernels) {
      const KernelClass& c = g.cls;
      if (!multiplies(c.kind)) continue;
      if (c.input == KernelPrecision::unknown) {
        ++out.kernels_unread;
        continue;
      }
      checked = true;
      KernelFinding f;
      f.instance = s.name;
      f.type = s.type;
      f.op = s.op;
      f.phase = s.phase;
      f.module = s.module;
      f.expected = expected;
      f.kernel = g.name;
      f.cls = c;
      f.launches = g.launches;
      f.total_ns = g.total_ns;
      f.intended = s.intended;
      const KernelPrecision want = precision_of(expected);
      const std::string wanted = long_name(expected);
      const bool narrow_input = c.input == KernelPrecision::f16 || c.input == KernelPrecision::bf16 ||
                                c.input == KernelPrecision::fp8 || c.input == KernelPrecision::fp4;
      if (low(expected)) {
        if (c.input == KernelPrecision::f32 || c.input == KernelPrecision::f64) {
          f.problem = KernelProblem::wider_kernel;
          if (shape.depthwise) {
            f.severity = Severity::note;
            f.reason = fmt::format("a depthwise convolution ({}): cuDNN multiplies it in {} on CUDA cores for every "
                                   "dtype (tensor cores do not fit depthwise); its tensors stay {}",
                                   shape.dims, precision_name(c.input), wanted);
          } else if (!inputs.empty()) {
            f.reason = with_shape(inputs + fmt::format("the library multiplied the {} data in {}",
                                                       long_name(*s.recorded_inputs), precision_name(c.input)),
                                  shape, channels);
          } else if (unseen) {
            f.severity = Severity::note;
            f.inputs_unseen = true;
            f.reason = algorithm + fmt::format("its kernel took {} operands; the op's input types were not recorded "
                                               "(torch.profiler's record_shapes=True records them), so whether it "
                                               "ran outside autocast or the library fell back from {} is not seen",
                                               precision_name(c.input), wanted);
          } else {
            f.reason = with_shape(algorithm + fmt::format("the library took the {} tensors and multiplied in {}",
                                                          wanted, precision_name(c.input)),
                                  shape, channels);
          }
        } else if (c.input == KernelPrecision::tf32 && unseen) {
          f.problem = KernelProblem::tf32_kernel;
          f.severity = Severity::note;
          f.inputs_unseen = true;
          f.reason = "TF32 multiplies float32 operands on tensor cores: the op's tensors were float32 here; its input "
                     "types were not recorded (record_shapes=True), so why it was not in " +
                     wanted + " is not seen";
        } else if (c.input == KernelPrecision::tf32) {
          f.problem = KernelProblem::tf32_kernel;
          f.reason = with_shape(inputs.empty()
                                    ? fmt::format("the library converted the {} data to float32 and multiplied in TF32 "
                                                  "(a float32 path, slower than {} tensor cores)",
                                                  wanted, wanted)
                                    : inputs + "TF32 is how the library multiplies float32 data on tensor cores "
                                               "(torch.backends.cuda.matmul.allow_tf32), at a fraction of the " +
                                          wanted + " rate",
                                shape, channels);
        } else if ((c.input == KernelPrecision::f16 || c.input == KernelPrecision::bf16) && c.input != want) {
          f.problem = KernelProblem::other_low_precision;
          f.reason = fmt::format("the kernel took {} where the policy's dtype is {}", precision_name(c.input), wanted);
        } else if (c.input == want && multiplies_matrices(c.kind) && c.tensor_cores == TensorCores::no) {
          f.problem = KernelProblem::cuda_cores;
          if (shape.depthwise) {
            f.severity = Severity::note;
            f.reason = fmt::format("a depthwise convolution ({}): tensor cores do not fit depthwise, on any framework",
                                   shape.dims);
          } else if (shape.vector) {
            f.severity = Severity::note;
            f.reason = fmt::format("a matrix-vector product ({}): memory-bound, each matrix element is read once and "
                                   "no tensor-core kernel pays; as expected",
                                   shape.dims);
          } else if (!algorithm.empty()) {
            f.reason = algorithm.substr(0, algorithm.size() - 2) +
                       (shape.dims.empty() ? std::string() : " (" + shape.dims + ")");
          } else {
            const std::string why = shape_reason(shape, channels);
            f.reason = why.empty() ? "the library chose a CUDA-core kernel for this shape" +
                                         (shape.dims.empty() ? std::string() : " (" + shape.dims + ")")
                                   : "likely because " + why;
          }
        } else {
          continue;
        }
      } else if (expected == DType::f32 && (narrow_input || c.input == KernelPrecision::tf32)) {
        f.problem = KernelProblem::narrower_kernel;
        f.reason = c.input == KernelPrecision::tf32
                       ? "TF32 keeps 10 mantissa bits of each float32 input: the op is not float32 as its policy "
                         "(" + std::string(amp::reason_name(s.reason)) + ") says; turn TF32 off for it "
                         "(PyTorch: torch.backends.cuda.matmul.allow_tf32 / torch.backends.cudnn.allow_tf32 = False)"
                       : fmt::format("the policy ({}) kept it in float32, but the kernel took {} operands",
                                     amp::reason_name(s.reason), precision_name(c.input));
      } else {
        continue;
      }
      (f.severity == Severity::warning ? out.findings : notes).push_back(std::move(f));
    }
    out.instances_checked += checked;
  }
  out.findings.insert(out.findings.end(), std::make_move_iterator(notes.begin()), std::make_move_iterator(notes.end()));
  return out;
}

}  // namespace ampcheck::inspector
