#!/usr/bin/env python3
"""Writes a large PyTorch profiler (Kineto 2022+) trace of a made-up transformer training
run, for the profile-reader benchmark: every step's forward ops under nn.Module frames
(python_function), the autograd thread's backward nodes, the optimizer, each op's
runtime launch, kernel and ac2g flows, with Input Dims, Input type and Concrete Inputs as
record_shapes writes them, and the Python frames with_stack adds. Deterministic: the
same arguments give the same bytes.

    make_trace.py OUT.json [--mb 100] [--rank 0]
"""
import argparse
import json

KERNELS = {
    "aten::addmm": "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_bias_TNT",
    "aten::mm": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_NNT",
    "aten::bmm": "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)",
    "aten::_flash_attention_forward": "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, false, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    "aten::native_layer_norm": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "aten::gelu": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
    "aten::add": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "aten::_foreach_add_": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)",
}


class Writer:
    def __init__(self, out, rank):
        self.out = out
        self.first = True
        self.ext = 1
        self.corr = 100000
        self.py = 1
        self.ev = 0
        self.rank = rank
        self.gpu_ts = 0.0

    def event(self, e):
        e.setdefault("args", {})["Ev Idx"] = self.ev
        self.ev += 1
        self.out.write(("\n  " if self.first else ",\n  ") + json.dumps(e, separators=(", ", ": ")))
        self.first = False

    def pyframe(self, name, tid, ts, dur, module=False):
        args = {"Python parent id": self.py - 1, "Python id": self.py}
        if module:
            args["Python module id"] = self.py
        self.py += 1
        self.event({"ph": "X", "cat": "python_function", "name": name, "pid": 7, "tid": tid, "ts": round(ts, 3),
                    "dur": round(dur, 3), "args": args})

    def op(self, name, tid, ts, dur, dims, types, seq=None, kernel=True):
        ext = self.ext
        self.ext += 1
        args = {"External id": ext, "Record function id": 0, "Concrete Inputs": ["" for _ in dims],
                "Input type": types, "Input Strides": [[1] * len(d) for d in dims], "Input Dims": dims}
        if seq is not None:
            args["Sequence number"] = seq
            args["Fwd thread id"] = 0 if tid == 1 else 1
        self.event({"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": round(ts, 3),
                    "dur": round(dur, 3), "args": args})
        if kernel and name in KERNELS:
            corr = self.corr
            self.corr += 1
            lts = ts + dur * 0.4
            self.event({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": tid,
                        "ts": round(lts, 3), "dur": 4.1, "args": {"External id": ext, "cbid": 211, "correlation": corr}})
            self.event({"ph": "s", "id": corr, "pid": 7, "tid": tid, "ts": round(lts, 3), "cat": "ac2g", "name": "ac2g"})
            self.gpu_ts = max(self.gpu_ts, lts + 5)
            kd = 12.0 if "gemm" in KERNELS[name] or "nvjet" in KERNELS[name] or "flash" in KERNELS[name] else 3.0
            self.event({"ph": "X", "cat": "kernel", "name": KERNELS[name], "pid": 0, "tid": 7,
                        "ts": round(self.gpu_ts, 3), "dur": kd,
                        "args": {"External id": ext, "queued": 0, "device": 0, "context": 1, "stream": 7,
                                 "correlation": corr, "registers per thread": 128, "shared memory": 49152,
                                 "blocks per SM": 1.0, "warps per SM": 8.0, "grid": [132, 1, 1], "block": [384, 1, 1],
                                 "est. achieved occupancy %": 12}})
            self.event({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": round(self.gpu_ts, 3), "cat": "ac2g",
                        "name": "ac2g", "bp": "e"})
            self.gpu_ts += kd + 0.5
        return ext


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--rank", type=int, default=0)
    a = ap.parse_args()
    target = int(a.mb * 1024 * 1024)
    bf = "c10::BFloat16"
    B, T, D, H = 8, 1024, 1024, 16
    with open(a.out, "w") as out:
        out.write('{\n"schemaVersion": 1,\n"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", '
                  '"computeMajor": 9, "computeMinor": 0}],\n"distributedInfo": {"backend": "nccl", "rank": %d, '
                  '"world_size": 1},\n"traceEvents": [' % a.rank)
        w = Writer(out, a.rank)
        ts = 1000.0
        step = 0
        while out.tell() < target:
            # A step: 12 blocks of 165 us forward, 96 backward nodes of 32 us, the optimizer.
            forward_us, backward_us, optimizer_us = 12 * 165, 10 + 96 * 32 + 10, 300
            w.event({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d" % step, "pid": 7, "tid": 1,
                     "ts": ts, "dur": forward_us + backward_us + optimizer_us, "args": {"External id": w.ext}})
            seq = step * 10000
            # Forward, under nn.Module frames.
            w.pyframe("nn.Module: GPT_0", 1, ts, forward_us, module=True)
            for layer in range(12):
                lt = ts
                w.pyframe("nn.Module: Block_%d" % layer, 1, lt, 160, module=True)
                for i, (mod, op, dims, types) in enumerate([
                        ("LayerNorm_%d" % (2 * layer), "aten::native_layer_norm", [[B, T, D], [D], [D], [D]], [bf] * 4),
                        ("Linear_%d" % (4 * layer), "aten::addmm", [[3 * D], [B * T, D], [D, 3 * D], [], []], [bf, bf, bf, "Scalar", "Scalar"]),
                        ("Attention_%d" % layer, "aten::_flash_attention_forward", [[B, H, T, D // H]] * 3, [bf] * 3),
                        ("Linear_%d" % (4 * layer + 1), "aten::addmm", [[D], [B * T, D], [D, D], [], []], [bf, bf, bf, "Scalar", "Scalar"]),
                        ("LayerNorm_%d" % (2 * layer + 1), "aten::native_layer_norm", [[B, T, D], [D], [D], [D]], [bf] * 4),
                        ("Linear_%d" % (4 * layer + 2), "aten::addmm", [[4 * D], [B * T, D], [D, 4 * D], [], []], [bf, bf, bf, "Scalar", "Scalar"]),
                        ("GELU_%d" % layer, "aten::gelu", [[B, T, 4 * D]], [bf]),
                        ("Linear_%d" % (4 * layer + 3), "aten::addmm", [[D], [B * T, 4 * D], [4 * D, D], [], []], [bf, bf, bf, "Scalar", "Scalar"]),
                        (None, "aten::add", [[B, T, D], [B, T, D]], [bf, bf])]):
                    t0 = lt + 1 + i * 17
                    if mod:
                        w.pyframe("nn.Module: " + mod, 1, t0, 16, module=True)
                        w.pyframe("torch/nn/modules/module.py(1747): _call_impl", 1, t0 + 0.2, 15.5)
                        w.pyframe("torch/nn/functional.py(2900): " + op.split("::")[1], 1, t0 + 0.4, 15)
                    w.op(op, 1, t0 + 1, 14, dims, types, seq=seq)
                    seq += 1
                ts += 165
            # Backward on the autograd thread.
            bt = ts + 10
            for n in range(12 * 8):
                node = ["AddmmBackward0", "NativeLayerNormBackward0", "GeluBackward0", "AddBackward0"][n % 4]
                w.op("autograd::engine::evaluate_function: " + node, 2, bt, 30, [], [], seq=step * 10000 + n, kernel=False)
                w.op(node, 2, bt + 1, 28, [], [], seq=step * 10000 + n, kernel=False)
                if node == "AddmmBackward0":
                    w.op("aten::mm", 2, bt + 2, 12, [[B * T, D], [D, D]], [bf, bf])
                    w.op("aten::mm", 2, bt + 15, 12, [[D, B * T], [B * T, D]], [bf, bf])
                else:
                    w.op("aten::add", 2, bt + 2, 20, [[B, T, D], [B, T, D]], [bf, bf])
                bt += 32
            ts = bt + 10
            # The optimizer.
            w.event({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step", "pid": 7, "tid": 1,
                     "ts": ts, "dur": 200, "args": {"External id": w.ext}})
            for i in range(8):
                w.op("aten::_foreach_add_", 1, ts + 2 + i * 24, 22, [[], []], ["TensorList", "TensorList"])
            ts += 300
            step += 1
        out.write('\n],\n"traceName": "synthetic"\n}\n')


if __name__ == "__main__":
    main()
