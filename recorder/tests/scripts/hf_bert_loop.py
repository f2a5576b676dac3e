"""A Hugging Face BERT trained in a custom loop, as users write one (written for ampcheck's
tests): the model called with keyword arguments only, padded batches whose attention mask
transformers turns into a finfo.min additive mask (SDPA's math path on the CPU: its
_safe_softmax), AdamW with a linear warmup schedule, gradient accumulation dividing each
micro-batch's loss by the accumulation steps, autocast in bf16 or fp16 (with a GradScaler).

  python hf_bert_loop.py [--dtype bf16|fp16] [--steps 4] [--accum 2] [--warmup 2] [--device cpu|cuda]
"""
import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--accum", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64)
    model = BertForSequenceClassification(cfg).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=a.warmup, num_training_steps=a.steps)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(a.device, enabled=dtype == torch.float16)
    g = torch.Generator().manual_seed(1)
    for step in range(a.steps):
        seen = 0.0
        for _ in range(a.accum):
            lengths = torch.randint(8, 32, (a.batch,), generator=g)
            mask = (torch.arange(32)[None, :] < lengths[:, None]).long()  # padding at the end
            batch = {"input_ids": torch.randint(1, 500, (a.batch, 32), generator=g) * mask,
                     "attention_mask": mask, "labels": torch.randint(0, 2, (a.batch,), generator=g)}
            batch = {k: v.to(a.device) for k, v in batch.items()}
            with torch.autocast(a.device, dtype=dtype):
                out = model(**batch)
            loss = out.loss / a.accum
            scaler.scale(loss).backward()
            seen += loss.item()
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad()
        print(f"step {step + 1} loss {seen:.6f}", flush=True)


if __name__ == "__main__":
    main()
