"""The fp32 twin's patches (ampcheck_recorder/twin.py), each against what PyTorch does
without them: autocast and the GradScaler disabled, the script's casts to float16 and
bfloat16 kept in float32, the recorder's own casts untouched. Run in a fresh interpreter:
the patches are process-wide. Also the same patches narrowed to bisect-nan --script's trials
of the optimizer state and the master weights."""
import json
import os
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


def test_a_hugging_face_model_loaded_in_bfloat16_loads_in_fp32_in_the_twin(tmp_path):
    # from_pretrained(torch_dtype=...), the way most bf16 fine-tuning scripts load their model:
    # without the twin the parameters are bfloat16 (the reference: transformers itself), in it
    # float32, so the twin is the fp32 run and not the same bf16 run again.
    pytest = __import__("pytest")
    pytest.importorskip("transformers")
    code = textwrap.dedent("""
        import sys, torch
        from transformers import BertConfig, BertForSequenceClassification
        cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)
        BertForSequenceClassification(cfg).save_pretrained(sys.argv[2])
        if sys.argv[1] == "twin":
            from ampcheck_recorder.twin import turn_amp_off
            turn_amp_off()
        m = BertForSequenceClassification.from_pretrained(sys.argv[2], torch_dtype=torch.bfloat16)
        print(sorted({str(p.dtype) for p in m.parameters()}))
    """)
    seen = {}
    for mode in ("plain", "twin"):
        done = subprocess.run([sys.executable, "-c", code, mode, str(tmp_path / mode)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        seen[mode] = done.stdout.strip().splitlines()[-1]
    assert seen == {"plain": "['torch.bfloat16']", "twin": "['torch.float32']"}


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


# bisect-nan --script's trials of the cures that are no op (twin.py): each check runs the same
# code patched and unpatched, and the unpatched run is PyTorch's own behaviour, the reference.
OPTIMIZER_STATE_CHECK = textwrap.dedent('''
    import json
    import sys
    import torch
    from ampcheck_recorder import Recorder
    if sys.argv[1] == "patched":
        from ampcheck_recorder.twin import keep_optimizer_state_fp32
        keep_optimizer_state_fp32()
        keep_optimizer_state_fp32()  # idempotent

    class LowState(torch.optim.Optimizer):
        """Its state made in 16 bits every way a script makes it, inside step()."""
        def __init__(self, params):
            super().__init__(params, dict(lr=0.1))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    st = self.state[p]
                    if not st:
                        st["to"] = torch.zeros_like(p).to(torch.bfloat16)
                        st["half"] = p.detach().half()
                        st["like"] = torch.zeros_like(p, dtype=torch.bfloat16)
                        st["full"] = torch.full(p.shape, 1.0, dtype=torch.float16)
                        st["new"] = p.new_zeros(p.shape, dtype=torch.bfloat16)
                    st["half"].mul_(0.5)  # its own tensor: p is not halved
                    p.add_(p.grad, alpha=-group["lr"])

    model = torch.nn.Linear(4, 1, bias=False)
    before = model.weight.detach().clone()
    optimizer = LowState(model.parameters())
    rec = Recorder(model, listen="all")
    try:
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
    finally:
        rec.close()
    out = {k: str(v.dtype) for k, v in optimizer.state[model.weight].items()}
    # Outside the step the script's casts are its own.
    out["outside"] = [str(torch.ones(2).to(torch.bfloat16).dtype), str(torch.zeros(2, dtype=torch.float16).dtype),
                      str(torch.ones(2).half().dtype)]
    # The gradient of the sum over a batch of two rows of ones is 2 for each weight.
    out["updated"] = torch.equal(model.weight.detach(), before - 0.1 * 2.0)
    print(json.dumps(out))
''')


def _check(code, *args):
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_optimizer_state_trial_keeps_the_moments_a_step_makes_in_16_bits_in_fp32():
    plain = _check(OPTIMIZER_STATE_CHECK, "plain")
    patched = _check(OPTIMIZER_STATE_CHECK, "patched")
    outside = ["torch.bfloat16", "torch.float16", "torch.float16"]
    assert plain == {"to": "torch.bfloat16", "half": "torch.float16", "like": "torch.bfloat16",
                     "full": "torch.float16", "new": "torch.bfloat16", "outside": outside, "updated": True}
    assert patched == {"to": "torch.float32", "half": "torch.float32", "like": "torch.float32",
                       "full": "torch.float32", "new": "torch.float32", "outside": outside, "updated": True}


MASTER_WEIGHTS_CHECK = textwrap.dedent('''
    import copy
    import json
    import sys
    import torch
    if sys.argv[1] == "patched":
        from ampcheck_recorder.twin import keep_master_weights_fp32
        keep_master_weights_fp32()
        keep_master_weights_fp32()  # idempotent

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(4, 4)
            self.head = torch.nn.Linear(4, 1)
            self.kept = torch.nn.Linear(4, 1)

        def forward(self, x):
            h = torch.tanh(self.body(x))
            with torch.autocast("cpu", enabled=False):  # the model's own fp32 region
                kept = self.kept(h.to(self.kept.weight.dtype))
            return self.head(h), kept

    torch.manual_seed(0)
    model = Net().bfloat16()
    dtype = next(model.parameters()).dtype
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):  # as twin_train.py bf16_weights
        head, kept = model(x.to(dtype))
    head.float().sum().backward()
    half = torch.nn.Linear(4, 2).half()
    out = {"param": str(model.body.weight.dtype), "grad": str(model.body.weight.grad.dtype),
           "head": str(head.dtype), "kept": str(kept.dtype),
           "submodule": str(model.body(x.to(dtype)).dtype),  # called on its own, still under autocast
           "copy": str(copy.deepcopy(model)(x.to(dtype))[0].dtype),
           "autocast_after": torch.is_autocast_enabled("cpu"),
           "tensor": str(x.bfloat16().dtype),  # the script's tensor casts are its own
           "half": [str(half.weight.dtype), str(half(x.half()).dtype)]}
    print(json.dumps(out))
''')


def test_the_master_weights_trial_trains_the_fp32_model_under_autocast():
    plain = _check(MASTER_WEIGHTS_CHECK, "plain")
    patched = _check(MASTER_WEIGHTS_CHECK, "patched")
    assert plain == {"param": "torch.bfloat16", "grad": "torch.bfloat16", "head": "torch.bfloat16",
                     "kept": "torch.bfloat16", "submodule": "torch.bfloat16", "copy": "torch.bfloat16",
                     "autocast_after": False, "tensor": "torch.bfloat16",
                     "half": ["torch.float16", "torch.float16"]}
    # fp32 weights and gradients, the compute in bfloat16 by autocast (entered although the
    # script disabled it around the call), an autocast(enabled=False) inside the model kept.
    assert patched == {"param": "torch.float32", "grad": "torch.float32", "head": "torch.bfloat16",
                       "kept": "torch.float32", "submodule": "torch.bfloat16", "copy": "torch.bfloat16",
                       "autocast_after": False, "tensor": "torch.bfloat16",
                       "half": ["torch.float32", "torch.float16"]}


TWIN_TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "twin_train.py")


def _record(tmp_path, name, mode, steps, **env_extra):
    """twin_train.py MODE recorded through the bootstrap (as bisect-nan's trials are)."""
    from ampcheck_recorder import inject
    out = tmp_path / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPCHECK_RECORD_")}
    env.update(PYTHONPATH=inject.bootstrap_path(), AMPCHECK_RECORD_OUT=str(out), AMPCHECK_RECORD_SEED="0",
               OMP_NUM_THREADS="1", **env_extra)
    done = subprocess.run([sys.executable, TWIN_TRAIN, mode, "--steps", str(steps)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if not out.exists():
        return None, done.stderr
    with open(out) as f:
        return json.load(f), done.stderr


def test_the_trials_cures_reach_the_planted_scripts_through_the_bootstrap(tmp_path):
    # Planted (twin_train.py): bf16_weights casts its model to bfloat16 (its parameters are
    # swamped, named without ':'); bf16_moments keeps its moments in bfloat16 ("weight:exp_avg").
    def swamped(report):
        return sorted(s["parameter"] for s in report["swamping"])

    weights, _ = _record(tmp_path, "weights", "bf16_weights", 8)
    masters, _ = _record(tmp_path, "masters", "bf16_weights", 8, AMPCHECK_RECORD_FP32_MASTER_WEIGHTS="on")
    assert swamped(weights) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert swamped(masters) == [], "fp32 master weights: no parameter is stored in 16 bits"
    assert masters["summary"]["low_precision_calls"] > 0, "the model still computes in bfloat16, under autocast"
    moments, _ = _record(tmp_path, "moments", "bf16_moments", 8)
    fp32_moments, _ = _record(tmp_path, "fp32_moments", "bf16_moments", 8, AMPCHECK_RECORD_FP32_OPTIMIZER_STATE="on")
    assert swamped(moments) == ["bias:exp_avg", "bias:exp_avg_sq", "weight:exp_avg", "weight:exp_avg_sq"]
    assert swamped(fp32_moments) == []
    none, stderr = _record(tmp_path, "bad", "bf16_moments", 2, AMPCHECK_RECORD_FP32_OPTIMIZER_STATE="yes")
    assert none is None and 'AMPCHECK_RECORD_FP32_OPTIMIZER_STATE="yes" is not on or off' in stderr
