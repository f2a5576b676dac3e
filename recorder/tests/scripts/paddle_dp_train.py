"""PaddlePaddle data parallel (paddle.DataParallel), run by paddle.distributed.launch with
several processes on the CPU (gloo), for ampcheck's tests."""
import paddle
import paddle.distributed as dist

dist.init_parallel_env()
paddle.seed(0)
model = paddle.DataParallel(paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 4)))
opt = paddle.optimizer.SGD(parameters=model.parameters(), learning_rate=0.1)
paddle.seed(1 + dist.get_rank())
for _ in range(3):
    loss = model(paddle.randn([4, 8])).mean()
    loss.backward()
    opt.step()
    opt.clear_grad()
