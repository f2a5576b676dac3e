"""A PaddlePaddle training script that knows nothing of ampcheck, for recording it from
outside (`ampcheck record -- python paddle_train.py ...`, `python -m ampcheck_recorder run
--framework paddle -- paddle_train.py ...`).

    python paddle_train.py FAMILY STEPS [--scaler]

FAMILY: healthy (a ReLU between two Linear layers), log (log of a Linear's output: NaN
from its negative values, forward), sqrt (sqrt(relu(x)): +Inf gradient where relu made
0, backward). --scaler: a paddle.amp.GradScaler (which Paddle turns off on a CPU place).
"""

import sys
import warnings

import paddle

warnings.simplefilter("ignore")


class Log(paddle.nn.Layer):
    def forward(self, x):
        return paddle.log(x)


class Sqrt(paddle.nn.Layer):
    def forward(self, x):
        return paddle.sqrt(paddle.nn.functional.relu(x))


MIDDLE = {"healthy": paddle.nn.ReLU, "log": Log, "sqrt": Sqrt}


class Net(paddle.nn.Layer):
    def __init__(self, middle):
        super().__init__()
        self.fc1 = paddle.nn.Linear(4, 8)
        self.mid = middle
        self.fc2 = paddle.nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(self.mid(self.fc1(x)))


def main(argv):
    family, steps = argv[0], int(argv[1])
    paddle.seed(0)
    model = Net(MIDDLE[family]())
    opt = paddle.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    scaler = paddle.amp.GradScaler(init_loss_scaling=1024) if "--scaler" in argv else None
    for step in range(steps):
        x, y = paddle.randn([16, 4]), paddle.randn([16, 1])
        with paddle.amp.auto_cast(level="O1"):
            loss = ((model(x) - y) ** 2).mean()
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaled = scaler.scale(loss)
            scaled.backward()
            scaler.minimize(opt, scaled)
        opt.clear_grad()
    print(f"trained {family} for {steps} steps", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
