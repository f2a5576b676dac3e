"""The fp32 twin's patches (ampcheck_recorder/twin.py), each against what PyTorch does
without them: autocast and the GradScaler disabled, the script's casts to float16 and
bfloat16 kept in float32, the recorder's own casts untouched. Run in a fresh interpreter:
the patches are process-wide."""
import subprocess
import sys
import textwrap

CHECK = textwrap.dedent('''
    import torch
    from ampcheck_recorder.twin import turn_amp_off
    turn_amp_off()
    turn_amp_off()  # idempotent
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert lin(x).dtype == torch.float32, "autocast should be off"
        assert not torch.is_autocast_enabled("cpu")

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def decorated(a):
        return lin(a)
    assert decorated(x).dtype == torch.float32
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    assert not scaler.is_enabled()
    loss = lin(x).sum()
    assert scaler.scale(loss) is loss, "a disabled scaler returns the loss as it is"
    assert torch.nn.Linear(4, 4).half().weight.dtype == torch.float32
    assert torch.nn.Linear(4, 4).bfloat16().weight.dtype == torch.float32
    assert torch.nn.Linear(4, 4).to(torch.float16).weight.dtype == torch.float32
    assert torch.nn.Linear(4, 4).to("cpu", torch.bfloat16).weight.dtype == torch.float32
    assert x.half().dtype == torch.float32 and x.bfloat16().dtype == torch.float32
    assert x.to(torch.bfloat16).dtype == torch.float32 and x.to(dtype=torch.float16).dtype == torch.float32
    assert torch.arange(3).half().dtype == torch.float32, "an integer tensor's half() becomes float32"
    assert x.to(torch.float64).dtype == torch.float64, "other casts are the script's"
    assert torch.arange(3).to(torch.int32).dtype == torch.int32
    # The recorder's own casts (its statistics ask what a value becomes in float16): untouched.
    scope = {"__name__": "ampcheck_recorder.stats", "torch": torch, "x": x}
    exec("y16 = x.to(torch.float16); yb = x.bfloat16()", scope)
    assert scope["y16"].dtype == torch.float16 and scope["yb"].dtype == torch.bfloat16
    print("ok")
''')


def test_the_twin_turns_amp_and_the_scripts_low_precision_casts_off():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_without_the_twin_the_same_calls_are_low_precision():
    # The reference the test above departs from: PyTorch's own behaviour, unpatched.
    plain = textwrap.dedent('''
        import torch
        lin = torch.nn.Linear(4, 4)
        x = torch.randn(2, 4)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert lin(x).dtype == torch.bfloat16
        assert torch.nn.Linear(4, 4).half().weight.dtype == torch.float16
        assert x.to(torch.bfloat16).dtype == torch.bfloat16
        assert torch.amp.GradScaler("cpu").is_enabled()
        print("ok")
    ''')
    done = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_updates_lost_to_rounding_are_counted_per_low_precision_parameter(validate):
    # Written from bfloat16's spacing, not from the recorder: ones have a spacing of 2^-7, so
    # an SGD update of lr * grad = 0.1 * 1e-4 = 1e-5 (under half of it) leaves every element
    # as it was; zeros take the same update exactly (1e-5 is a bfloat16 value's neighbourhood
    # of 0, which holds it); an fp32 parameter is never counted (it has its own precision).
    import torch
    from ampcheck_recorder import Recorder

    class Planted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stuck = torch.nn.Parameter(torch.ones(8, dtype=torch.bfloat16))
            self.moves = torch.nn.Parameter(torch.zeros(8, dtype=torch.bfloat16))
            self.wide = torch.nn.Parameter(torch.ones(8))

        def forward(self, x):
            return (self.stuck.float() * x).sum() + (self.moves.float() * x).sum() + (self.wide * x).sum()

    model = Planted()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.full((8,), 1e-4)
    rec = Recorder(model, listen="all")
    try:
        for _ in range(3):
            optimizer.zero_grad()
            model(x).backward()
            optimizer.step()
    finally:
        report = rec.close()
    validate(report)
    swamping = {s["parameter"]: s for s in report["swamping"]}
    assert set(swamping) == {"stuck", "moves"}
    assert swamping["stuck"]["updates"] == 3 and swamping["stuck"]["fraction"] == 1.0
    assert swamping["moves"]["updates"] == 3 and swamping["moves"]["fraction"] == 0.0
    assert torch.equal(model.stuck.detach(), torch.ones(8, dtype=torch.bfloat16))  # the reference: it did not move


def test_optimizer_state_kept_in_16_bits_is_counted_with_its_lost_updates(validate):
    # A hand-written optimizer keeping its second moment in bfloat16 beside fp32 weights (a
    # low-memory Adam): v = 0.999 v + 0.001 g^2 from v = 1 with g = 2e-3 changes v by
    # about -1e-3, under half of bfloat16's spacing below 1 (2^-8 / 2), so v never moves.
    import torch
    from ampcheck_recorder import Recorder

    class LowStateSgd(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, dict(lr=0.1))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    st = self.state[p]
                    if not st:
                        st["exp_avg_sq"] = torch.ones_like(p, dtype=torch.bfloat16)
                    st["exp_avg_sq"].mul_(0.999).addcmul_(p.grad.bfloat16(), p.grad.bfloat16(), value=0.001)
                    p.add_(-group["lr"] * p.grad / st["exp_avg_sq"].float().sqrt())

    model = torch.nn.Linear(4, 1, bias=False)
    optimizer = LowStateSgd(model.parameters())
    x = torch.full((2, 4), 1e-3)
    rec = Recorder(model, listen="all")
    try:
        for _ in range(3):
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
    finally:
        report = rec.close()
    validate(report)
    swamping = {s["parameter"]: s for s in report["swamping"]}
    # The state exists from the first update on: the second and third are seen.
    assert set(swamping) == {"weight:exp_avg_sq"}
    assert swamping["weight:exp_avg_sq"]["updates"] == 2 and swamping["weight:exp_avg_sq"]["fraction"] == 1.0
    assert torch.equal(optimizer.state[model.weight]["exp_avg_sq"], torch.ones(1, 4, dtype=torch.bfloat16))


def test_the_twins_kth_run_shifts_every_seed_the_script_sets_by_k():
    # The reference is the unshifted call with the shifted seed: torch.manual_seed(5) under
    # an offset of 3 draws what torch.manual_seed(8) draws without one; likewise random and
    # numpy, and Lightning's seed_everything, which calls them.
    check = textwrap.dedent('''
        import random
        import numpy
        import torch
        def draws(seed):
            torch.manual_seed(seed); random.seed(seed); numpy.random.seed(seed)
            return torch.rand(3).tolist(), random.random(), numpy.random.rand()
        plain = draws(8)
        from ampcheck_recorder.twin import offset_seeds
        offset_seeds(3)
        assert draws(5) == plain, "seed 5 shifted by 3 is seed 8"
        assert torch.initial_seed() == 8
        import lightning
        lightning.seed_everything(0, verbose=False)
        assert torch.initial_seed() == 3
        scope = {"__name__": "ampcheck_recorder.inject", "torch": torch}
        exec("torch.manual_seed(5)", scope)  # the recorder's own seeding is its own
        assert torch.initial_seed() == 5
        print("ok")
    ''')
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_paddle_scripts_twin_turns_its_amp_off():
    # The reference is Paddle's own API with enable=False, what a user would write for fp32.
    check = textwrap.dedent('''
        import paddle
        from ampcheck_recorder.twin import turn_paddle_amp_off, offset_paddle_seeds
        turn_paddle_amp_off()
        turn_paddle_amp_off()
        scaler = paddle.amp.GradScaler(init_loss_scaling=1024.0)
        assert not scaler._enable, "the twin's scaler is disabled"
        assert not paddle.amp.GradScaler(enable=False)._enable
        lin = paddle.nn.Linear(4, 4)
        opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=lin.parameters())
        model, optimizer = paddle.amp.decorate(models=lin, optimizers=opt, level="O2", dtype="bfloat16")
        assert model is lin and optimizer is opt and lin.weight.dtype == paddle.float32
        assert paddle.amp.decorate(models=lin, level="O2") is lin
        assert paddle.nn.Linear(2, 2).bfloat16().weight.dtype == paddle.float32
        assert paddle.nn.Linear(2, 2).to(dtype="float16").weight.dtype == paddle.float32
        def draw(seed):
            paddle.seed(seed)
            return paddle.rand([3]).numpy().tolist()
        plain = draw(8)
        offset_paddle_seeds(3)
        assert draw(5) == plain, "paddle.seed(5) shifted by 3 is paddle.seed(8)"
        print("ok")
    ''')
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")
