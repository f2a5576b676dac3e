// What the device tests share: a GPU test skips naming why there is none, and compares
// tensors on any device by their bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/hooks.h"
#include "engine/tensor.h"
#include "kernels/cuda/cuda.h"
#include "kernels/kernel_note.h"

namespace ampcheck::testing {

inline bool has_gpu() { return kernels::cuda::probe().device_count > 0; }

// The storage bytes of t, copied to the host from whatever device it is on.
inline std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu);
  std::vector<std::uint8_t> b(h.nbytes());
  if (!b.empty()) std::memcpy(b.data(), h.raw(), b.size());
  return b;
}

// Kernel notes are taken only while someone listens (kernels/kernel_note.h), and the
// engine takes them into each op event's kernel id: an observer that keeps those ids,
// attached for the scope, with noting on for kernels called directly (no op event).
// take() gives the ids heard and any notes not taken since, and clears both.
class NotesKept {
 public:
  NotesKept() {
    add_observer(&heard_);
    kernels::set_noting(true);
    (void)kernels::take_kernel_notes();
  }
  ~NotesKept() {
    remove_observer(&heard_);
    kernels::set_noting(false);
  }
  NotesKept(const NotesKept&) = delete;
  NotesKept& operator=(const NotesKept&) = delete;
  std::string take() {
    std::string out = std::move(heard_.ids);
    heard_.ids.clear();
    const std::string direct = kernels::take_kernel_notes();
    return direct.empty() ? out : out + (out.empty() ? "" : "; ") + direct;
  }

 private:
  struct Heard : Observer {
    std::string ids;
    void on_op_end(const OpEvent& e) override { ids += (ids.empty() ? "" : "; ") + e.kernel; }
  };
  Heard heard_;
};

}  // namespace ampcheck::testing

// In a test body: skip, saying why, where no GPU is usable.
#define SKIP_WITHOUT_GPU()                                                                  \
  do {                                                                                      \
    if (!::ampcheck::testing::has_gpu())                                                    \
      GTEST_SKIP() << "no GPU: " << ::ampcheck::kernels::cuda::probe().why_none;            \
  } while (0)
