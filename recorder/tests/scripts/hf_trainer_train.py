"""BERT fine-tuned by Hugging Face's Trainer on the CPU (use_cpu=True), written for
ampcheck's tests: `--fp16` is the flag the Trainer ignores there (it trains in fp32 without
a word), `--bf16` the one it honours.

  python hf_trainer_train.py [--fp16 | --bf16]
"""
import argparse

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Pairs(Dataset):
    def __init__(self, n=32):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, 500, (n, 24), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(24, dtype=torch.long), "labels": self.labels[i]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fp16", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--out", default="hf-trainer-out")
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32)
    args = TrainingArguments(output_dir=a.out, per_device_train_batch_size=8, num_train_epochs=1, fp16=a.fp16,
                             bf16=a.bf16, use_cpu=True, report_to=[], save_strategy="no", learning_rate=1e-3,
                             seed=0, logging_steps=100)
    Trainer(model=BertForSequenceClassification(cfg), args=args, train_dataset=Pairs()).train()


if __name__ == "__main__":
    main()
