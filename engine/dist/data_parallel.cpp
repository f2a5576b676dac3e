#include "engine/dist/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/hooks.h"
#ifdef AMPCHECK_HAVE_NCCL
#include "engine/dist/nccl_reduce.h"
#endif

namespace ampcheck::dist {
namespace {

template <typename T>
void average_bucketed(std::vector<Tensor>& grads, Communicator& comm, std::size_t bucket_bytes) {
  const std::size_t per_bucket = std::max<std::size_t>(1, bucket_bytes / sizeof(T));
  std::size_t first = 0;
  while (first < grads.size()) {
    // Whole gradients into one bucket up to its size (a larger gradient goes alone).
    std::size_t last = first, count = 0;
    while (last < grads.size() && (count == 0 || count + static_cast<std::size_t>(grads[last].numel()) <= per_bucket))
      count += static_cast<std::size_t>(grads[last++].numel());
    std::vector<T> buffer(count);
    std::size_t at = 0;
    for (std::size_t k = first; k < last; ++k) {
      const Tensor host = grads[k].to(Device::cpu);
      std::memcpy(buffer.data() + at, host.data<T>(), static_cast<std::size_t>(host.numel()) * sizeof(T));
      at += static_cast<std::size_t>(host.numel());
    }
    comm.all_reduce_sum(buffer.data(), static_cast<std::int64_t>(buffer.size()));
    const T inverse = T(1) / static_cast<T>(comm.size());
    for (T& v : buffer) v *= inverse;
    at = 0;
    for (std::size_t k = first; k < last; ++k) {
      Tensor host = Tensor::empty(grads[k].shape(), grads[k].dtype(), Device::cpu);
      std::memcpy(host.data<T>(), buffer.data() + at, static_cast<std::size_t>(host.numel()) * sizeof(T));
      at += static_cast<std::size_t>(host.numel());
      grads[k].copy_from(host);
    }
    first = last;
  }
}

}  // namespace

void average_gradients(optim::Optimizer& optimizer, Communicator& comm, std::size_t bucket_bytes) {
  if (comm.size() == 1) return;
  std::vector<Tensor> f32, f64;
  std::vector<std::size_t> f32_index, f64_index;
  for (std::size_t i = 0; i < optimizer.size(); ++i) {
    Tensor g = optimizer.gradient(i);
    if (!g.defined()) continue;
    if (g.dtype() == DType::f64) {
      f64.push_back(g);
    } else {
      if (g.dtype() != DType::f32) {  // not unscaled: reduce in f32 all the same
        g = g.to(DType::f32);
        optimizer.set_gradient(i, g);
      }
      f32.push_back(g);
    }
  }
#ifdef AMPCHECK_HAVE_NCCL
  // Gradients on the GPU: NCCL when every rank can use it (all ranks decide alike).
  std::vector<Tensor> on_gpu;
  for (auto* list : {&f32, &f64})
    for (const Tensor& g : *list)
      if (g.device() == Device::cuda) on_gpu.push_back(g);
  if (!on_gpu.empty()) {
    std::string why_not;
    if (nccl_average(on_gpu, comm, why_not)) {
      for (auto* list : {&f32, &f64})
        std::erase_if(*list, [](const Tensor& g) { return g.device() == Device::cuda; });
    }
  }
#endif
  average_bucketed<float>(f32, comm, bucket_bytes);
  average_bucketed<double>(f64, comm, bucket_bytes);
}

void average_gradients_in_dtype(optim::Optimizer& optimizer, Communicator& comm, std::size_t bucket_bytes) {
  if (comm.size() == 1) return;
  // Summed in f32 (exact for two ranks' 16-bit values, and at most one rounding more for
  // more ranks than a 16-bit ring), averaged, and rounded once into the gradient's dtype.
  for (std::size_t i = 0; i < optimizer.size(); ++i) {
    const Tensor g = optimizer.gradient(i);
    if (!g.defined() || g.dtype() == DType::f32 || g.dtype() == DType::f64) continue;
    std::vector<Tensor> one = {g.to(DType::f32)};
    average_bucketed<float>(one, comm, bucket_bytes);
    Tensor back = one[0].to(g.dtype());
    optimizer.set_gradient(i, back);
  }
  average_gradients(optimizer, comm, bucket_bytes);  // those already f32 or f64
}

std::string first_nonfinite_gradient(const optim::Optimizer& optimizer) {
  for (std::size_t i = 0; i < optimizer.size(); ++i) {
    const Tensor g = optimizer.gradient(i);
    if (!g.defined()) continue;
    for (double v : g.to_f64())
      if (!std::isfinite(v)) return optimizer.params()[i].first;
  }
  return "";
}

std::uint64_t parameter_checksum(const optim::Optimizer& optimizer) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& [name, p] : optimizer.params()) {
    const Tensor host = p.to(Device::cpu);
    const auto* bytes = static_cast<const unsigned char*>(static_cast<const void*>(host.data<unsigned char>()));
    for (std::size_t k = 0; k < host.nbytes(); ++k) {
      h ^= bytes[k];
      h *= 1099511628211ull;
    }
  }
  return h;
}

DataParallelStep data_parallel_update(amp::GradScaler& scaler, optim::Optimizer& optimizer, Communicator& comm,
                          const DataParallelOptions& options, std::int64_t step, double local_loss,
                          std::int64_t shard_rows) {
  DataParallelStep e;
  e.step = step;
  e.rank = comm.rank();
  e.world = comm.size();
  e.scale = scaler.scale();
  e.local_loss = local_loss;
  e.shard_rows = shard_rows;
  e.reduced = options.reduce_found_inf;
  if (options.reduce_dtype == "grad") {
    // Averaged in their own dtype, then unscaled and checked: a rank's Inf/NaN carries into
    // the sum, and an overflow of the sum is found on every rank. Only then is this rank's
    // own gradient (the parameter's .grad, which the average did not replace) searched, to
    // name it.
    average_gradients_in_dtype(optimizer, comm, options.bucket_bytes);
    scaler.unscale_(optimizer);
    if (scaler.found_inf()) {
      for (const auto& [name, p] : optimizer.params()) {
        if (!p.grad().defined()) continue;
        const std::vector<double> v = p.grad().to_f64();
        if (std::any_of(v.begin(), v.end(), [](double x) { return !std::isfinite(x); })) {
          e.overflow = name;
          break;
        }
      }
      e.local_found_inf = !e.overflow.empty();
    }
    const bool found = scaler.found_inf();
    e.found_inf = options.reduce_found_inf ? comm.all_reduce_or(found) : found;
    scaler.set_found_inf(e.found_inf);
  } else {
    scaler.unscale_(optimizer);  // this rank's gradients, checked before any reduction
    e.local_found_inf = scaler.found_inf();
    if (e.local_found_inf) e.overflow = first_nonfinite_gradient(optimizer);
    e.found_inf = options.reduce_found_inf ? comm.all_reduce_or(e.local_found_inf) : e.local_found_inf;
    scaler.set_found_inf(e.found_inf);
    average_gradients(optimizer, comm, options.bucket_bytes);
  }
  e.skipped = !scaler.step(optimizer);
  e.checksum = parameter_checksum(optimizer);
  if (observed()) hooks::data_parallel_step(e);
  return e;
}

}  // namespace ampcheck::dist
