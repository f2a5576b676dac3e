"""A small PaddlePaddle regression under paddle.amp.auto_cast (O1, bfloat16) with a
GradScaler, seeded by the script itself (paddle.seed(0)), for `ampcheck compare --script`:
its fp32 twin (auto_cast and the scaler disabled) from shifted seeds; mixed precision as it
should be used, so the AMP run stays within the fp32 runs' own spread
(tests/e2e/record_compare.sh)."""
import paddle

paddle.seed(0)
x = paddle.randn([512, 32])
w_true = paddle.randn([32, 1])
y = paddle.tanh(x @ w_true / 4)
model = paddle.nn.Sequential(paddle.nn.Linear(32, 64), paddle.nn.Tanh(), paddle.nn.Linear(64, 1))
optimizer = paddle.optimizer.SGD(learning_rate=0.01, parameters=model.parameters())
scaler = paddle.amp.GradScaler(init_loss_scaling=1024.0)
for step in range(100):
    with paddle.amp.auto_cast(level="O1", dtype="bfloat16"):
        pred = model(x)
    loss = paddle.nn.functional.mse_loss(pred.astype("float32"), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.clear_grad()
print(f"final loss {float(loss):.4f}")
