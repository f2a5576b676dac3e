"""A Hugging Face Accelerate loop (Accelerator(mixed_precision=...), prepare, backward),
run by `accelerate launch` with several processes on the CPU, for ampcheck's tests."""
import torch
import torch.nn as nn
from accelerate import Accelerator

acc = Accelerator(cpu=True)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
loader = torch.utils.data.DataLoader(data, batch_size=8)
model, opt, loader = acc.prepare(model, opt, loader)
for x, y in loader:
    loss = nn.functional.cross_entropy(model(x), y)
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
acc.print(f"trained on {acc.num_processes} processes")
