// The recurrent family on the CPU (kernels/rnn_kernels.h): the cells of one step over the
// batch, each element through the shared formulas in the compute type and stored with one
// rounding, rows of the batch over the thread pool (elements are independent: the bits do
// not depend on the thread count). The CPU has no whole-sequence kernel: the ops run their
// composed path (engine/ops/rnn.cpp), the definition the GPU's cuDNN calls are held to.
#include <algorithm>
#include <stdexcept>

#include "kernels/cpu/parallel.h"
#include "kernels/element.h"
#include "kernels/rnn_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

using i64 = std::int64_t;

// Rows of the batch per work item: about 4096 elements.
i64 grain(const RnnStep& s) { return std::max<i64>(1, 4096 / std::max<i64>(1, s.hidden)); }

template <typename T>
void cell_rows(const RnnStep& s, const View& gi, const View& gh, const View& h, const View& c, const View& act,
               const View& h_new, const View& c_new, i64 lo, i64 hi) {
  const i64 H = s.hidden, G = rnn_gates(s.mode);
  for (i64 b = lo; b < hi; ++b)
    for (i64 j = 0; j < H; ++j) {
      const i64 e = b * H + j;
      auto at = [&](i64 k) { return b * G * H + k * H + j; };
      if (s.mode == RnnMode::lstm) {
        T pre[4], a[4], cn, hn;
        for (int k = 0; k < 4; ++k) pre[k] = load_element<T>(gi.data, gi.dtype, at(k)) + load_element<T>(gh.data, gh.dtype, at(k));
        lstm_cell(pre, load_element<T>(c.data, c.dtype, e), a, cn, hn);
        for (int k = 0; k < 4; ++k) store_element(act.data, act.dtype, at(k), a[k]);
        store_element(c_new.data, c_new.dtype, e, cn);
        store_element(h_new.data, h_new.dtype, e, hn);
      } else if (s.mode == RnnMode::gru) {
        T x[3], r[3], a[3], hn;
        for (int k = 0; k < 3; ++k) {
          x[k] = load_element<T>(gi.data, gi.dtype, at(k));
          r[k] = load_element<T>(gh.data, gh.dtype, at(k));
        }
        gru_cell(x, r, load_element<T>(h.data, h.dtype, e), a, hn);
        for (int k = 0; k < 3; ++k) store_element(act.data, act.dtype, at(k), a[k]);
        store_element(h_new.data, h_new.dtype, e, hn);
      } else {
        const T hn = rnn_cell(s.mode, load_element<T>(gi.data, gi.dtype, at(0)) + load_element<T>(gh.data, gh.dtype, at(0)));
        store_element(act.data, act.dtype, at(0), hn);
        store_element(h_new.data, h_new.dtype, e, hn);
      }
    }
}

void cell(const RnnStep& s, const View& gi, const View& gh, const View& h, const View& c, const View& act,
          const View& h_new, const View& c_new) {
  with_compute_type(act.dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(s.batch, grain(s), [&](i64 lo, i64 hi) { cell_rows<T>(s, gi, gh, h, c, act, h_new, c_new, lo, hi); });
  });
}

template <typename T>
void cell_backward_rows(const RnnStep& s, const View& act, const View& gh, const View& h, const View& c,
                        const View& c_new, const View& dh, const View& dc, const View& dgi, const View& dgh,
                        const View& dh_direct, const View& dc_prev, i64 lo, i64 hi) {
  const i64 H = s.hidden, G = rnn_gates(s.mode);
  for (i64 b = lo; b < hi; ++b)
    for (i64 j = 0; j < H; ++j) {
      const i64 e = b * H + j;
      auto at = [&](i64 k) { return b * G * H + k * H + j; };
      const T g = load_element<T>(dh.data, dh.dtype, e);
      if (s.mode == RnnMode::lstm) {
        T a[4], d[4], dcp;
        for (int k = 0; k < 4; ++k) a[k] = load_element<T>(act.data, act.dtype, at(k));
        lstm_cell_backward(a, load_element<T>(c.data, c.dtype, e), load_element<T>(c_new.data, c_new.dtype, e), g,
                           load_element<T>(dc.data, dc.dtype, e), d, dcp);
        for (int k = 0; k < 4; ++k) {
          store_element(dgi.data, dgi.dtype, at(k), d[k]);
          store_element(dgh.data, dgh.dtype, at(k), d[k]);
        }
        store_element(dc_prev.data, dc_prev.dtype, e, dcp);
      } else if (s.mode == RnnMode::gru) {
        T a[3], di[3], dr[3], direct;
        for (int k = 0; k < 3; ++k) a[k] = load_element<T>(act.data, act.dtype, at(k));
        gru_cell_backward(a, load_element<T>(gh.data, gh.dtype, at(2)), load_element<T>(h.data, h.dtype, e), g, di, dr,
                          direct);
        for (int k = 0; k < 3; ++k) {
          store_element(dgi.data, dgi.dtype, at(k), di[k]);
          store_element(dgh.data, dgh.dtype, at(k), dr[k]);
        }
        store_element(dh_direct.data, dh_direct.dtype, e, direct);
      } else {
        const T d = rnn_cell_backward(s.mode, load_element<T>(act.data, act.dtype, at(0)), g);
        store_element(dgi.data, dgi.dtype, at(0), d);
        store_element(dgh.data, dgh.dtype, at(0), d);
      }
    }
}

void cell_backward(const RnnStep& s, const View& act, const View& gh, const View& h, const View& c, const View& c_new,
                   const View& dh, const View& dc, const View& dgi, const View& dgh, const View& dh_direct,
                   const View& dc_prev) {
  with_compute_type(dgi.dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(s.batch, grain(s), [&](i64 lo, i64 hi) {
      cell_backward_rows<T>(s, act, gh, h, c, c_new, dh, dc, dgi, dgh, dh_direct, dc_prev, lo, hi);
    });
  });
}

std::string no_fused(DType, const RnnShape&) {
  return "the CPU runs the sequence step by step (GEMMs and the cells; no whole-sequence kernel)";
}
std::int64_t no_reserve(DType, const RnnShape&) { return 0; }
[[noreturn]] void unreachable() {
  throw std::logic_error("recurrent layer: the CPU has no whole-sequence kernel (fused_problem says so)");
}
void fused_forward(const View&, const View&, const View&, const View&, const View&, const View&, const View&,
                   const RnnShape&, const View&, const View&) {
  unreachable();
}
void fused_backward(const View&, const View&, const View&, const View&, const View&, const View&, const View&,
                    const View&, const View&, const View&, const RnnShape&, const View&, const View&, const View&,
                    const View&, const View&, const View&, const View&) {
  unreachable();
}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const RnnKernels& RnnKernels::cpu() {
  static const RnnKernels k{&cpu::cell,       &cpu::cell_backward,  &cpu::no_fused,
                            &cpu::no_reserve, &cpu::fused_forward, &cpu::fused_backward};
  return k;
}

}  // namespace ampcheck::kernels
