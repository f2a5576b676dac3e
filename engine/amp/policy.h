// The AMP cast policy: levels O0-O3, the default white/black/promote lists (one table,
// in policy.cpp, read from the op list's categories), the user's custom lists, and the
// autocast scope that makes call() apply it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/ops/registry.h"

namespace ampcheck::amp {

// O0: everything fp32 (the reference). O1: per-op casts from the lists, parameters fp32.
// O2: parameters low except normalisation layers, fp32 master weights in the optimizer,
// every op low except the black list. O3: everything low, no masters (Apex O3).
enum class Level : std::uint8_t { O0, O1, O2, O3 };
std::string_view level_name(Level level);
std::optional<Level> parse_level(std::string_view text);  // "O1", "o1", "1"

struct AmpOptions {
  Level level = Level::O1;
  DType dtype = DType::f16;  // f16 or bf16
  std::vector<std::string> custom_white_list;  // PaddlePaddle semantics: these run low
  std::vector<std::string> custom_black_list;  // these run in fp32
  // Module paths whose forward runs wholly in fp32: autocast off inside and floating
  // inputs cast to fp32 (PyTorch's `with autocast(enabled=False): m(x.float())`). A path
  // names the module and everything below it ("encoder.layers.1" covers its attn).
  std::vector<std::string> fp32_modules;
  bool keep_norm_fp32 = true;  // O2: BatchNorm/LayerNorm parameters stay fp32
  bool master_weight = true;   // O2: the optimizer keeps fp32 masters
};

// Why an op runs in the dtype it runs in (what reports show per op call).
enum class Reason : std::uint8_t {
  off,           // O0, or outside any autocast scope
  white,         // default list: cast down to the low dtype
  black,         // default list: cast up to fp32
  promote,       // runs in the widest input dtype
  follow,        // runs in its input's dtype
  custom_white,  // the user's custom_white_list
  custom_black,  // the user's custom_black_list
  unsupported,   // the backend has no low-precision kernel for it: runs in fp32
};
std::string_view reason_name(Reason r);

class PolicyError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// An op name users write in a custom list: ours ("softmax") or a framework's op name
// ("matmul_v2", "elementwise_add", "reduce_sum", "lookup_table_v2", "addmm", "cat").
// Throws PolicyError naming the closest known op.
Op resolve_op_name(std::string_view name, std::string_view list_name);
// The framework names resolve_op_name accepts for `op` (its alias table), sorted; empty
// when users know the op by our name alone. For listings such as `ampcheck ops`.
std::vector<std::string_view> op_aliases(Op op);
// The name a framework's users know `op` by, for fixes written in their words:
// PaddlePaddle's kernel type, as its custom_black_list takes it ("elementwise_mul":
// Paddle's own "mul" is a matrix product), and PyTorch's ATen op ("mul", "cat", "amax").
std::string_view paddle_op_name(Op op);
std::string_view torch_op_name(Op op);

class Policy {
 public:
  // Validates the options: dtype f16/bf16, every custom op known, none in both lists.
  explicit Policy(AmpOptions options);

  const AmpOptions& options() const { return options_; }
  Reason reason(Op op) const;
  // The dtype the floating inputs of `op` are cast to before it runs, or nothing.
  std::optional<DType> cast_target(Op op) const;
  // Which inputs the cast applies to: normalisation ops cast only their data input
  // (their weights stay as decorated); i64 inputs are never cast.
  bool casts_input(Op op, std::size_t index) const;
  // The dtype `op` computes and returns in, given its inputs' dtypes (after the casts).
  DType compute_dtype(Op op, const std::vector<DType>& input_dtypes) const;

  // The inputs after the policy's casts, each inserted as a registry `cast` op so that
  // autograd and the inspector see it. Casts of fp32 parameters (leaves that require
  // grad) are cached for the life of the outermost autocast scope, as PyTorch does.
  std::vector<Tensor> apply(Op op, std::vector<Tensor> inputs) const;

  // Whether `module_path` is one of fp32_modules or inside one (dotted components).
  bool fp32_module(const std::string& module_path) const;
  // The policy in force inside such a module: every op custom_black (fp32).
  const Policy& fp32_policy() const { return *fp32_; }

 private:
  struct Fp32Tag {};
  Policy(const AmpOptions& options, Fp32Tag);
  AmpOptions options_;
  std::vector<Reason> reasons_;  // per op, for this level and these lists
  std::shared_ptr<const Policy> fp32_;
};

// RAII: call() applies `policy` while the scope lives. Nestable; Autocast(nullptr)
// turns AMP off inside (a region the user wants in fp32).
class Autocast {
 public:
  explicit Autocast(const Policy* policy);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  const Policy* previous_;
};
const Policy* active_policy();

}  // namespace ampcheck::amp
