#include "profiles/chrome_trace.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "profiles/json_stream.h"
#include "profiles/profile_error.h"

namespace ampcheck::profiles {
namespace {

using T = JsonStream::Type;

// One event as read; reused from event to event so that reading allocates only for what
// is kept.
struct Event {
  std::string ph, cat, name, pid, tid;
  std::int64_t ts = 0, dur = 0;
  bool has_ts = false, has_dur = false;
  std::int64_t id = -1;  // a flow's id: the correlation id of its launch
  std::int64_t external = -1, correlation = -1, device = -1, stream = -1, sequence = -1;
  Dim3 grid, block;
  bool has_inputs = false;
  OpInputs inputs;
  std::string key;  // scratch

  void reset() {
    ph.clear(), cat.clear(), name.clear(), pid.clear(), tid.clear();
    ts = dur = 0;
    has_ts = has_dur = false;
    id = external = correlation = device = stream = sequence = -1;
    grid = block = Dim3{};
    has_inputs = false;
    inputs.dims.clear(), inputs.types.clear(), inputs.concrete.clear();
  }
};

// What an event's category makes it.
enum class Role { skip, op, annotation, step, module, launch, kernel, memcpy, memset, flow };

// The categories of every generation (chrome_trace.h); anything else is not needed here.
Role role_of(const Event& e, bool& paddle) {
  const std::string_view c = e.cat;
  if (e.ph == "s") return c == "ac2g" || c == "async" || c == "async_gpu" ? Role::flow : Role::skip;
  if (e.ph != "X") return Role::skip;
  if (c == "cpu_op" || c == "Operator") return Role::op;
  if (c == "user_annotation" || c == "UserDefined" || c == "PythonUserDefined" || c == "PythonOp" ||
      c == "Forward" || c == "Backward" || c == "Optimization" || c == "Dataloader" || c == "Communication")
    return e.name.rfind("ProfilerStep#", 0) == 0 ? Role::step : Role::annotation;
  if (c == "ProfileStep") {
    paddle = true;
    return Role::step;
  }
  if (c == "python_function") return e.name.rfind("nn.Module: ", 0) == 0 ? Role::module : Role::skip;
  if (c == "cuda_runtime" || c == "cuda_driver" || c == "Runtime" || c == "Driver") return Role::launch;
  if (c == "CudaRuntime") {
    paddle = true;
    return Role::launch;
  }
  if (c == "kernel" || c == "Kernel") return Role::kernel;
  if (c == "gpu_memcpy" || c == "Memcpy") return Role::memcpy;
  if (c == "gpu_memset" || c == "Memset") return Role::memset;
  if (c == "OperatorInner") paddle = true;  // Paddle's steps inside an op: the op is what launched
  return Role::skip;
}

void read_text_or_number(JsonStream& in, std::string& out) {
  out.clear();
  const T t = in.peek();
  if (t == T::string) in.read_string(out);
  else if (t == T::number) out = in.read_number();
  else in.skip();
}

std::uint32_t read_u32(JsonStream& in) {
  std::int64_t v = 0;
  return in.read_int(v) && v > 0 && v < (std::int64_t{1} << 32) ? static_cast<std::uint32_t>(v) : 0;
}

Dim3 read_dim3(JsonStream& in) {
  Dim3 d;
  if (in.peek() != T::array) {
    in.skip();
    return d;
  }
  in.begin_array();
  std::uint32_t* slot[] = {&d.x, &d.y, &d.z};
  std::size_t i = 0;
  while (in.next_item()) {
    const std::uint32_t v = read_u32(in);
    if (i < 3) *slot[i] = v;
    ++i;
  }
  return d;
}

// One shape: a list of integers. A list of lists (a TensorList input) or anything else is
// not one shape: it is kept as an empty shape.
void read_shape(JsonStream& in, std::vector<std::int64_t>& shape) {
  shape.clear();
  if (in.peek() != T::array) {
    in.skip();
    return;
  }
  in.begin_array();
  bool plain = true;
  while (in.next_item()) {
    if (in.peek() != T::number) {
      plain = false;
      in.skip();
      continue;
    }
    std::int64_t v = 0;
    if (!in.read_int(v)) plain = false;
    shape.push_back(v);
  }
  if (!plain) shape.clear();
}

void read_shapes(JsonStream& in, std::vector<std::vector<std::int64_t>>& out) {
  out.clear();
  if (in.peek() != T::array) {
    in.skip();
    return;
  }
  in.begin_array();
  while (in.next_item()) read_shape(in, out.emplace_back());
}

void read_strings(JsonStream& in, std::vector<std::string>& out) {
  out.clear();
  if (in.peek() != T::array) {
    in.skip();
    return;
  }
  in.begin_array();
  while (in.next_item()) {
    std::string& s = out.emplace_back();
    if (in.peek() == T::string) in.read_string(s);
    else in.raw(s);
  }
}

// Paddle's {"X": [[64, 128]], "Y": [[128, 256]]} and {"X": ["float16"], ...}: one entry
// per tensor, in the slots' order.
void read_paddle_slots(JsonStream& in, OpInputs& inputs, bool dtypes) {
  if (in.peek() != T::object) {
    in.skip();
    return;
  }
  in.begin_object();
  std::string slot;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::string> types;
  while (in.next_key(slot)) {
    if (dtypes) {
      read_strings(in, types);
      for (std::string& t : types) inputs.types.push_back(std::move(t));
    } else {
      read_shapes(in, shapes);
      for (auto& s : shapes) {
        inputs.dims.push_back(std::move(s));
        inputs.concrete.push_back(slot);  // the slot's name, for the order below
      }
    }
  }
}

void read_args(JsonStream& in, Event& e) {
  if (in.peek() != T::object) {
    in.skip();
    return;
  }
  in.begin_object();
  std::string& key = e.key;
  while (in.next_key(key)) {
    if (key == "External id" || key == "external id") in.read_int(e.external);
    else if (key == "correlation" || key == "correlation id") in.read_int(e.correlation);
    else if (key == "device") in.read_int(e.device);
    else if (key == "stream") in.read_int(e.stream);
    else if (key == "grid") e.grid = read_dim3(in);
    else if (key == "block") e.block = read_dim3(in);
    else if (key == "Sequence number") in.read_int(e.sequence);
    else if (key == "Input Dims") {
      read_shapes(in, e.inputs.dims);
      e.has_inputs = true;
    } else if (key == "Input type") {
      read_strings(in, e.inputs.types);
      e.has_inputs = true;
    } else if (key == "Concrete Inputs") {
      read_strings(in, e.inputs.concrete);
      e.has_inputs = true;
    } else if (key == "input_shapes") {
      read_paddle_slots(in, e.inputs, false);
      e.has_inputs = true;
    } else if (key == "input_dtypes") {
      read_paddle_slots(in, e.inputs, true);
      e.has_inputs = true;
    } else {
      in.skip();
    }
  }
}

void read_event(JsonStream& in, Event& e) {
  e.reset();
  if (in.peek() != T::object) {
    in.skip();
    return;
  }
  in.begin_object();
  std::string& key = e.key;
  while (in.next_key(key)) {
    if (key == "ph") read_text_or_number(in, e.ph);
    else if (key == "cat") read_text_or_number(in, e.cat);
    else if (key == "name") read_text_or_number(in, e.name);
    else if (key == "pid") read_text_or_number(in, e.pid);
    else if (key == "tid") read_text_or_number(in, e.tid);
    else if (key == "ts") e.has_ts = in.read_micros_as_ns(e.ts);
    else if (key == "dur") e.has_dur = in.read_micros_as_ns(e.dur);
    else if (key == "id") in.read_int(e.id);
    else if (key == "args") read_args(in, e);
    else in.skip();
  }
}

// Paddle writes each name with its duration ("matmul_v2 dygraph[1.234 us]") and an op's
// name with the kind of record ("matmul_v2 dygraph", "matmul_v2_grad grad_node"): the op
// is the first word.
std::string_view paddle_name(std::string_view name, bool op) {
  if (!name.empty() && name.back() == ']') {
    const std::size_t open = name.rfind('[');
    if (open != std::string_view::npos) {
      const std::string_view inside = name.substr(open + 1, name.size() - open - 2);
      if (inside.ends_with(" us") || inside.ends_with(" ms") || inside.ends_with(" ns") || inside.ends_with(" s"))
        name = name.substr(0, open);
    }
  }
  if (op) name = name.substr(0, name.find(' '));
  return name;
}

// Paddle's slots come out of a std::map (alphabetical); the ops whose shapes are read need
// them in the op's own order.
void order_paddle_slots(std::string_view op, OpInputs& inputs) {
  static const std::vector<std::pair<std::string_view, std::vector<std::string_view>>> kOrders = {
      {"conv2d", {"Input", "Filter", "Bias"}},
      {"depthwise_conv2d", {"Input", "Filter", "Bias"}},
      {"conv2d_grad", {"Input", "Filter", "Output@GRAD"}},
      {"matmul_v2", {"X", "Y"}},
      {"matmul", {"X", "Y"}},
      {"matmul_v2_grad", {"X", "Y", "Out@GRAD"}},
      {"matmul_grad", {"X", "Y", "Out@GRAD"}},
      {"mul", {"X", "Y"}},
      {"fc", {"Input", "W", "Bias"}},
      {"bmm", {"X", "Y"}},
  };
  const auto it = std::find_if(kOrders.begin(), kOrders.end(), [&](const auto& o) { return o.first == op; });
  if (it == kOrders.end() || inputs.concrete.size() != inputs.dims.size()) return;
  std::vector<std::vector<std::int64_t>> dims;
  std::vector<std::string> slots;
  for (const std::string_view want : it->second)
    for (std::size_t i = 0; i < inputs.concrete.size(); ++i)
      if (inputs.concrete[i] == want) {
        dims.push_back(inputs.dims[i]);
        slots.push_back(inputs.concrete[i]);
      }
  for (std::size_t i = 0; i < inputs.concrete.size(); ++i)
    if (std::find(slots.begin(), slots.end(), inputs.concrete[i]) == slots.end()) {
      dims.push_back(inputs.dims[i]);
      slots.push_back(inputs.concrete[i]);
    }
  inputs.dims = std::move(dims);
  inputs.concrete = std::move(slots);
}

std::string inputs_key(const OpInputs& in) {
  std::string k;
  for (const auto& s : in.dims) {
    k += '[';
    for (const std::int64_t d : s) k += std::to_string(d) + ',';
    k += ']';
  }
  k += '|';
  for (const auto& t : in.types) k += t + ',';
  k += '|';
  for (const auto& c : in.concrete) k += c + '\x1f';
  return k;
}

// Paddle names a CPU thread twice, "123(C++)" and "123(Python)": one OS thread.
std::string_view thread_id(std::string_view tid) {
  for (const std::string_view suffix : {std::string_view("(C++)"), std::string_view("(Python)")})
    if (tid.ends_with(suffix)) return tid.substr(0, tid.size() - suffix.size());
  return tid;
}

struct Counts {
  std::int64_t cpu_op = 0, operator_2021 = 0, kernel = 0, kernel_2021 = 0, runtime = 0, runtime_2021 = 0,
               annotations = 0;
};

class Reader {
 public:
  explicit Reader(ByteSource& source) : source_(source), in_(source) {}

  Profile read() {
    p_.source = source_.label();
    const T top = in_.peek();
    if (top == T::array) {
      read_events();
      saw_events_ = true;
    } else if (top == T::object) {
      in_.begin_object();
      std::string key;
      while (in_.next_key(key)) {
        if (key == "traceEvents") {
          read_events();
          saw_events_ = true;
        } else if (key == "deviceProperties") {
          read_devices();
        } else if (key == "distributedInfo") {
          read_distributed();
        } else if (key == "schemaVersion") {
          // Kineto writes a number, Paddle a string ("1.0.1").
          if (in_.peek() == T::string) paddle_ = true;
          in_.skip();
        } else {
          in_.skip();
        }
      }
    } else {
      in_.fail("a Chrome trace starts with '{' or '['");
    }
    if (!saw_events_)
      throw ProfileError(source_.label() +
                         ": a JSON file without a \"traceEvents\" list: not a profiler's Chrome trace (an ampcheck "
                         "report is read with `ampcheck report`)");
    finish();
    return std::move(p_);
  }

 private:
  void read_devices() {
    if (in_.peek() != T::array) return in_.skip();
    in_.begin_array();
    std::string key, name;
    while (in_.next_item()) {
      if (in_.peek() != T::object) {
        in_.skip();
        continue;
      }
      in_.begin_object();
      name.clear();
      while (in_.next_key(key)) {
        if (key == "name") read_text_or_number(in_, name);
        else in_.skip();
      }
      if (!name.empty()) p_.devices.push_back(name);
    }
  }

  void read_distributed() {
    if (in_.peek() != T::object) return in_.skip();
    in_.begin_object();
    std::string key;
    while (in_.next_key(key)) {
      if (key == "rank") in_.read_int(p_.rank);
      else in_.skip();
    }
  }

  void read_events() {
    if (in_.peek() != T::array) {
      in_.fail("\"traceEvents\" is not a list");
    }
    in_.begin_array();
    Event e;
    while (in_.next_item()) {
      read_event(in_, e);
      take(e);
    }
  }

  std::uint32_t thread_of(const Event& e) {
    label_.assign("pid ").append(e.pid).append(" tid ").append(thread_id(e.tid));
    return p_.thread_of(label_);
  }

  void take(Event& e) {
    const Role role = role_of(e, paddle_);
    if (role == Role::skip) return;
    switch (role) {
      case Role::op:
        (e.cat == "cpu_op" ? counts_.cpu_op : counts_.operator_2021)++;
        [[fallthrough]];
      case Role::annotation:
      case Role::step:
      case Role::module: {
        if (!e.has_ts) return;
        if (role == Role::annotation) ++counts_.annotations;
        Op op;
        op.kind = role == Role::op ? OpKind::op
                  : role == Role::step ? OpKind::step
                  : role == Role::module ? OpKind::module
                                         : OpKind::annotation;
        std::string_view name = e.name;
        if (role == Role::module) name.remove_prefix(std::string_view("nn.Module: ").size());
        if (paddle_) name = paddle_name(name, role == Role::op);
        op.name = p_.intern(name);
        op.thread = thread_of(e);
        op.begin_ns = e.ts;
        op.end_ns = e.ts + std::max<std::int64_t>(e.dur, 0);
        op.external_id = e.external;
        op.sequence = e.sequence;
        // Paddle's profiler marks the phases with ranges of their own.
        if (e.cat == "Forward" || e.cat == "Backward" || e.cat == "Optimization") {
          op.phase = e.cat == "Forward" ? Phase::forward : e.cat == "Backward" ? Phase::backward : Phase::optimizer;
          op.phase_marked = true;
        }
        if (e.has_inputs && role == Role::op) {
          if (paddle_) order_paddle_slots(name, e.inputs);
          op.inputs = p_.intern_inputs(inputs_key(e.inputs), e.inputs);
        }
        p_.ops.push_back(op);
        return;
      }
      case Role::launch: {
        (e.cat == "Runtime" ? counts_.runtime_2021 : counts_.runtime)++;
        if (e.correlation < 0 || !e.has_ts) return;
        Launch l;
        l.correlation = e.correlation;
        l.thread = thread_of(e);
        l.ns = e.ts;
        l.name = p_.intern(paddle_ ? paddle_name(e.name, false) : std::string_view(e.name));
        l.external_id = e.external;
        p_.launches.push_back(l);
        return;
      }
      case Role::flow: {
        if (e.id < 0 || !e.has_ts) return;
        Launch l;
        l.correlation = e.id;
        l.thread = thread_of(e);
        l.ns = e.ts;
        flows_.push_back(l);
        return;
      }
      case Role::kernel:
      case Role::memcpy:
      case Role::memset: {
        if (role == Role::kernel) (e.cat == "Kernel" ? counts_.kernel_2021 : counts_.kernel)++;
        if (!e.has_ts) {
          ++untimed_;
          return;
        }
        Kernel k;
        k.kind = role == Role::kernel ? ActivityKind::kernel : role == Role::memcpy ? ActivityKind::memcpy
                                                                                    : ActivityKind::memset;
        k.name = p_.intern(paddle_ ? paddle_name(e.name, false) : std::string_view(e.name));
        k.start_ns = e.ts;
        k.duration_ns = std::max<std::int64_t>(e.dur, 0);
        k.device = static_cast<std::int32_t>(e.device);
        k.stream = static_cast<std::int32_t>(e.stream);
        k.grid = e.grid;
        k.block = e.block;
        k.correlation = e.correlation;
        k.external_id = e.external;
        p_.kernels.push_back(k);
        return;
      }
      case Role::skip: return;
    }
  }

  void finish() {
    const bool ops = counts_.cpu_op + counts_.operator_2021 > 0;
    const std::int64_t kernels = counts_.kernel + counts_.kernel_2021;
    if (paddle_) p_.format = Format::paddle;
    else if (counts_.cpu_op > 0 || counts_.kernel > 0 || counts_.runtime > 0) p_.format = Format::kineto;
    else if (counts_.operator_2021 > 0) p_.format = Format::kineto_2021;
    else p_.format = Format::kineto_legacy;
    if (kernels == 0) {
      if (ops || counts_.annotations > 0)
        throw ProfileError(source_.label() + ": no GPU kernels: the profile has " +
                           std::to_string(counts_.cpu_op + counts_.operator_2021) +
                           " CPU ops and no GPU activity; profile with ProfilerActivity.CUDA "
                           "(torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
                           "record_shapes=True); Paddle: targets=[ProfilerTarget.CPU, ProfilerTarget.GPU])");
      throw ProfileError(source_.label() +
                         ": a Chrome trace without GPU kernels or framework ops: not a profile of a GPU run");
    }
    if (!ops && p_.format != Format::paddle)
      p_.notes.push_back(
          "the trace holds no op events (HTA's older form, or a trace cut down to its GPU side): kernels are "
          "joined to their launches, not to ops");
    if (untimed_ > 0)
      p_.notes.push_back(std::to_string(untimed_) + " GPU events without a timestamp were set aside");
    // Flows stand in for launch events the trace lacks (the flow starts where the launch was made).
    std::vector<std::int64_t> have;
    have.reserve(p_.launches.size());
    for (const Launch& l : p_.launches) have.push_back(l.correlation);
    std::sort(have.begin(), have.end());
    for (Launch& f : flows_)
      if (!std::binary_search(have.begin(), have.end(), f.correlation)) {
        f.name = p_.intern("(flow)");
        p_.launches.push_back(f);
      }
    std::stable_sort(p_.kernels.begin(), p_.kernels.end(), [](const Kernel& a, const Kernel& b) {
      return std::tie(a.start_ns, a.device, a.stream, a.correlation) <
             std::tie(b.start_ns, b.device, b.stream, b.correlation);
    });
  }

  ByteSource& source_;
  JsonStream in_;
  Profile p_;
  std::vector<Launch> flows_;
  Counts counts_;
  bool paddle_ = false;
  bool saw_events_ = false;
  std::int64_t untimed_ = 0;
  std::string label_;
};

}  // namespace

Profile read_chrome_trace(ByteSource& source) { return Reader(source).read(); }

}  // namespace ampcheck::profiles
