"""A LightningModule trained by PyTorch Lightning's Trainer on the CPU, with validation,
written for ampcheck's tests. Lightning runs each training step's forward and backward
inside optimizer.step(closure).

  python lightning_train.py [--precision bf16-mixed] [--epochs 2]
"""
import argparse

import lightning as L
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).mean((2, 3)))

    def training_step(self, batch, i):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--precision", default="bf16-mixed")
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(32, 3, 8, 8), torch.randint(0, 4, (32,)))
    trainer = L.Trainer(max_epochs=a.epochs, accelerator="cpu", precision=a.precision, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=1, num_sanity_val_steps=0)
    trainer.fit(Net(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))


if __name__ == "__main__":
    main()
