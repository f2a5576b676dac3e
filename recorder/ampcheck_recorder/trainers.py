"""What mixed precision the script asked of the trainer that runs its loop: Hugging Face's
Trainer (TrainingArguments fp16/bf16), Accelerate (Accelerator(mixed_precision=...)) and
PyTorch Lightning (Trainer(precision=...)).

The recorder hears what really ran; these frameworks may run something else than asked,
silently: Accelerate (and so the Trainer, which trains through it) turns fp16 autocast off
on the CPU, and Lightning swaps 16-mixed for bf16-mixed there (with a warning). The verdict
names the flag when what ran differs from it. Read once, at the first optimizer step, from
the objects the call stack holds then (no import of any of these frameworks here).
"""

from __future__ import annotations

import sys

# The low-precision dtype each framework's flag asks for.
_HF_FLAGS = (("fp16", "float16"), ("bf16", "bfloat16"))
_ACCELERATE = {"fp16": "float16", "bf16": "bfloat16", "fp8": "float8"}
_LIGHTNING = {"16-mixed": "float16", "bf16-mixed": "bfloat16", "16-true": "float16", "bf16-true": "bfloat16",
              "16": "float16", "bf16": "bfloat16", "transformer-engine": "float8"}


def _is(obj, modules: tuple, name: str) -> bool:
    return any(c.__name__ == name and (c.__module__ or "").startswith(modules) for c in type(obj).__mro__)


def _hf_trainer(obj) -> dict | None:
    args = getattr(obj, "args", None)
    if args is None:
        return None
    asked = [(flag, dtype) for flag, dtype in _HF_FLAGS if getattr(args, flag, False)]
    flags = [f"{flag}=True" for flag, _ in asked]
    if getattr(args, "use_cpu", False) or getattr(args, "no_cuda", False):
        flags.append("use_cpu=True")
    return {"framework": "transformers.Trainer", "asked": f"TrainingArguments({', '.join(flags)})",
            "dtype": asked[0][1] if asked else ""}


def _lightning(trainer) -> dict | None:
    precision = str(getattr(trainer, "precision", "") or "")
    if not precision:
        return None
    accelerator = type(getattr(trainer, "accelerator", None)).__name__.replace("Accelerator", "").lower()
    where = f", accelerator='{accelerator}'" if accelerator and accelerator != "nonetype" else ""
    return {"framework": "lightning.Trainer", "asked": f"Trainer(precision='{precision}'{where})",
            "dtype": _LIGHTNING.get(precision, "")}


def _accelerate() -> dict | None:
    state = sys.modules.get("accelerate.state")
    shared = getattr(getattr(state, "AcceleratorState", None), "_shared_state", None) if state else None
    if not shared:
        return None
    mp = str(shared.get("_mixed_precision", shared.get("mixed_precision", "")) or "")
    if not mp:
        return None
    device = shared.get("device")
    where = f" on {device}" if device is not None else ""
    return {"framework": "accelerate.Accelerator", "asked": f"Accelerator(mixed_precision='{mp}'){where}",
            "dtype": _ACCELERATE.get(mp, "")}


def amp_asked(frame=None) -> dict | None:
    """The trainer on the call stack and what it was asked for: {"framework", "asked" (the
    flags as the script wrote them), "dtype" (the low-precision dtype asked, "" for none)}."""
    f = frame if frame is not None else sys._getframe(1)
    found = None
    while f is not None and found is None:
        local = f.f_locals
        for obj in (local.get("self"), local.get("trainer")):
            if obj is None:
                continue
            if _is(obj, ("transformers.",), "Trainer"):
                found = _hf_trainer(obj)
            elif _is(obj, ("lightning.", "pytorch_lightning."), "Trainer"):
                found = _lightning(obj)
            elif _is(getattr(obj, "trainer", None), ("lightning.", "pytorch_lightning."), "Trainer"):
                found = _lightning(obj.trainer)
            if found is not None:
                break
        f = f.f_back
    return found or _accelerate()


def ignored_note(asked: dict | None, ran: list, device: str) -> str:
    """Why the run's precision is not what the trainer was asked for, or ""."""
    if not asked or not asked["dtype"]:
        return ""
    if asked["dtype"] in ran:
        return ""
    if not ran:
        why = (": on the CPU, Accelerate (which the Trainer trains through) turns fp16 autocast off without a "
               "word; ask for bf16 there (bf16=True, mixed_precision='bf16'), or train on a GPU"
               if device == "cpu" and asked["dtype"] == "float16" and asked["framework"] != "lightning.Trainer"
               else "")
        return f"{asked['framework']} was given {asked['asked']} and ran nothing in {asked['dtype']}{why}"
    return (f"{asked['framework']} was given {asked['asked']} and ran in {' and '.join(ran)} instead of "
            f"{asked['dtype']}")
