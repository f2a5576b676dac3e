#!/usr/bin/env bash
# DelayedScaling(scaling_factor_compute_algo=lambda ...) against PyTorch itself: for each
# function and amax sequence, `ampcheck fp8-scale --json` gives the scale after every
# step's update; the reference replays the sequence through a transcription of
# TransformerEngine's Python update path (transformer_engine/pytorch/fp8.py:
# _update_amax_history, _default_get_amax_and_update_history, _compute_scaling_factor and
# _amax_and_scale_update, as TE 1.x and 2.x write them) on real float32 tensors, the
# user's lambda evaluated by Python and PyTorch. Scales are compared bit for bit.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/record.sh"
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work"

"$py" - "$bin" "$work" <<'EOF' || fail "ampcheck's scaling functions differ from PyTorch's (above)"
import json, random, struct, subprocess, sys, types
import torch

binary, work = sys.argv[1], sys.argv[2]

def te_update_amax_history(amax_history):  # fp8.py, _update_amax_history
    if amax_history.shape[0] > 1:
        new_amax_history = torch.roll(amax_history, -1, 0)
        amax_history.copy_(new_amax_history)
    amax_history[0].fill_(0.0)
    return amax_history

def te_get_amax_and_update_history(amax_history, amax_compute_algo):  # _default_get_amax_and_update_history
    if amax_compute_algo == "max":
        amax = torch.max(amax_history, dim=0).values
    else:
        amax = amax_history[0].clone()
    amax_history = te_update_amax_history(amax_history)
    return amax_history, amax

def reference(fn, amaxes, length, algo, margin):
    recipe = types.SimpleNamespace(margin=margin, amax_history_len=length)
    history = torch.zeros(length, 1, dtype=torch.float32)
    scale = torch.ones(1, dtype=torch.float32)
    fp8_max = 448.0  # Format.HYBRID.value.max_fwd: the input's format
    out = []
    for a in amaxes:
        history[0] = torch.fmax(history[0], torch.tensor([a], dtype=torch.float32))  # the cast's amax
        new_history, amax = te_get_amax_and_update_history(history, algo)  # _amax_and_scale_update
        new_scale = fn(amax, scale, fp8_max, recipe)                        # _compute_scaling_factor
        scale.copy_(new_scale)
        history.copy_(new_history)
        out.append(float(scale[0]))
    return out

def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]

def number(v):
    return float(v)  # a finite number, or "inf", "-inf", "nan"

functions = [
    "lambda amax, scale, fp8_max, recipe: fp8_max / amax / 2 ** recipe.margin",
    "lambda a, s, m, r: torch.where(a > 0.0, m / a, s)",
    "lambda amax, scale, fp8_max, recipe: torch.where(torch.isfinite(amax) & (amax > 0), (fp8_max / amax) / (2 ** recipe.margin), scale)",
    "lambda amax, scale, fp8_max, recipe: torch.pow(2.0, torch.floor(torch.log2(fp8_max / amax)) - recipe.margin)",
    "lambda amax, scale, fp8_max, recipe: (fp8_max - 16) / torch.clamp(amax, min=1e-12)",
    "lambda a, s, m, r: m / a if a > 0 else s * 0.5",
    "lambda a, s, m, r: torch.minimum(m / a, torch.full_like(a, torch.finfo(torch.float32).max))",
    "lambda amax, scale, fp8_max, recipe: 0.9 * scale + 0.1 * (fp8_max / torch.clamp_min(amax, 1e-3))",
    "lambda amax, scale, fp8_max, recipe: torch.round(fp8_max / (amax + 1e-7) * 3) / 3 - recipe.amax_history_len // 8",
]
rng = random.Random(7)
sequences = [
    [0.0, 0.0, 1.5, 3.0, 0.0, 1000.0, 2.0, 2.0, 0.015625, 7.25],
    [rng.choice([0.0, rng.uniform(0, 4), rng.uniform(0, 1e4), 10 ** rng.uniform(-30, 30)]) for _ in range(40)],
    [float(struct.unpack("<f", struct.pack("<f", rng.uniform(1e-3, 1e3)))[0]) for _ in range(40)],
]
failures = 0
cases = 0
for fn_text in functions:
    fn = eval(fn_text, {"torch": torch})
    for seq in sequences:
        for length, algo, margin in [(1, "max", 0), (4, "max", 2), (16, "most_recent", 0), (16, "max", 1)]:
            recipe = (f"DelayedScaling(margin={margin}, amax_history_len={length}, amax_compute_algo=\"{algo}\", "
                      f"scaling_factor_compute_algo={fn_text})")
            amax_text = ",".join(repr(float(struct.unpack("<f", struct.pack("<f", a))[0])) for a in seq)
            p = subprocess.run([binary, "fp8-scale", "--recipe", recipe, "--amax", amax_text, "--json"],
                               capture_output=True, text=True)
            if p.returncode not in (0, 1):  # 1: a step saturates
                print(f"FAIL: {recipe}: exit {p.returncode}: {p.stderr}")
                failures += 1
                continue
            got = [number(s["scale_after"]) for s in json.loads(p.stdout)["steps"]]
            want = reference(fn, [float(struct.unpack("<f", struct.pack("<f", a))[0]) for a in seq], length, algo, margin)
            cases += 1
            for step, (g, w) in enumerate(zip(got, want), start=1):
                if bits(g) != bits(w) and not (g != g and w != w):
                    print(f"FAIL: {fn_text} (history {length}, {algo}, margin {margin}): step {step}: ampcheck {g!r}, PyTorch {w!r}")
                    failures += 1
                    break
print(f"{cases} sequences compared, {failures} differ")
sys.exit(1 if failures else 0)
EOF

# The unguarded function on a tensor whose amax is 0 (a zero-initialised LoRA B): the
# infinite scale is named at the step that casts with it.
expect 0 "step 2 casts with scale inf" -- "$bin" fp8-scale --amax 0,0.5,0.5 \
  --recipe "DelayedScaling(scaling_factor_compute_algo=lambda amax, scale, fp8_max, recipe: fp8_max / amax)"
expect 2 "is not a function a scaling function may call here" -- "$bin" fp8-scale --amax 1 \
  --recipe "DelayedScaling(scaling_factor_compute_algo=lambda amax, scale, fp8_max, recipe: np.max(amax))"
expect 2 "write its body as a lambda" -- "$bin" fp8-scale --amax 1 \
  --recipe "DelayedScaling(scaling_factor_compute_algo=my_scale_fn)"

[[ $fails -eq 0 ]] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
