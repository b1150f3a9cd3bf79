#!/usr/bin/env python3
"""Does reprise train GPT-2 as PyTorch does? Issue 40's correctness bar, on the GPU.

A small GPT-2 (2 layers, 128 wide, 4 heads, vocabulary 512, context 64, batch 4) is built in
reprise (reprise.models.build_gpt2) and in PyTorch (torch_gpt2.py's nanoGPT-style model); the
PyTorch model starts from reprise's initial weights (copied by name, trainer.get_parameter), and
both train --steps (10) steps on the same batches: AdamW (betas 0.9/0.95, eps 1e-8, weight decay
0.1 on 2-D weights only), gradient clipping at 1.0, learning rate 1e-3 with 3 warm-up steps then
a cosine to 0.1x at step 10 (reprise's LrSchedule; torch_gpt2.lr_factor is the same formula).
The batches are random walks over the vocabulary (each next token 1 to 3 above the last), so the
loss falls and the comparison is of a model that learns, not of noise.

Run for each --precision:
  fp32  TF32 off on both sides; the losses must agree within 1e-4 relative at every step
  bf16  reprise's compute_dtype bfloat16 against torch.autocast(bfloat16); within 2e-2
and the parameters after the last step: the relative 2-norm of the difference of all parameters
together, ||p_reprise - p_torch|| / ||p_torch||, within the same tolerance (each tensor's is
printed; one over 10x the tolerance is flagged; the key third of each c_attn bias, whose
gradient is zero but for rounding, is shown and not counted: see compare_params). A yardstick
row shows how far PyTorch's own bf16 run is from its fp32 run. Prints a PASS/FAIL table; exit
status 0 when every check passes, 1 when one fails, 2 when it cannot run (no torch, no GPU, no
reprise module: the reason is printed). Where reprise's trainer cannot be made with its default
non-finite guard, that is a FAIL row, and the comparison is repeated with the guard off
(non_finite=ignore, which changes no finite step) so that the numbers are still compared.

The reprise module is imported from $REPRISE_PYTHON_PATH, else .stage/python, else build/python
(a module built for the Python that runs this script: python3 is 3.12 on the GPU host).

  python3 tools/bench/gpt2_torch_check.py [--precision fp32,bf16] [--json check.json]
  python3 tools/bench/gpt2_torch_check.py --self-test   # torch against torch, no reprise, no GPU
"""
import argparse, json, math, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2}
TIED = "lm_head.weight"  # torch's name for the output projection, the same tensor as wte's


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="fp32,bf16", help="comma list of fp32, bf16")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-warmup", type=int, default=3)
    p.add_argument("--min-lr-factor", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1234, help="the batches' seed")
    p.add_argument("--tol-fp32", type=float, default=TOLERANCE["fp32"])
    p.add_argument("--tol-bf16", type=float, default=TOLERANCE["bf16"])
    p.add_argument("--non-finite", choices=("skip", "stop", "ignore"), default=None,
                   help="reprise's non-finite guard policy (default: the Trainer's own; where the "
                   "trainer cannot be made with it, the check is repeated with ignore)")
    p.add_argument("--self-test", action="store_true",
                   help="compare torch with torch (CPU if no GPU): checks this script, not reprise")
    p.add_argument("--json", metavar="FILE", help="write every number here")
    a = p.parse_args(argv)
    a.precision = [x.strip() for x in a.precision.split(",") if x.strip()]
    bad = [x for x in a.precision if x not in TOLERANCE]
    if bad or not a.precision:
        p.error(f"--precision: unknown {bad}; choose from fp32, bf16")
    if a.steps < 1 or a.seq < 2 or min(a.batch, a.layers, a.heads, a.width, a.vocab) < 1:
        p.error("need --steps >= 1, --seq >= 2 and positive sizes")
    a.tol = {"fp32": a.tol_fp32, "bf16": a.tol_bf16}
    return a


def batches(a):
    """(tokens, targets) int32 [B, T] per step: random walks, next token 1..3 above the last."""
    import numpy as np
    rng = np.random.default_rng(a.seed)
    out = []
    for _ in range(a.steps):
        start = rng.integers(0, a.vocab, (a.batch, 1))
        walk = (start + np.concatenate([np.zeros((a.batch, 1), np.int64),
                                        np.cumsum(rng.integers(1, 4, (a.batch, a.seq)), axis=1)],
                                       axis=1)) % a.vocab
        out.append((walk[:, :-1].astype(np.int32), walk[:, 1:].astype(np.int32)))
    return out


class TorchSide:
    """torch_gpt2's model and the step reprise runs: AdamW (foreach=False, the reference
    implementation), clip_grad_norm_, the scheduled rate set before each step."""

    def __init__(self, a, precision, device, init=None):
        import torch
        import torch_gpt2
        self.torch, self.a, self.precision, self.device = torch, a, precision, device
        self.model = torch_gpt2.build_gpt2(a.layers, a.heads, a.width, a.vocab, a.seq).to(device)
        self.step_count, self.transposed = 0, []
        if init is not None:
            self.load(init)
        self.opt = torch_gpt2.make_adamw(self.model, a.lr, a.weight_decay, fused=False)
        self.lr_factor, self.autocast = torch_gpt2.lr_factor, torch_gpt2.autocast

    def names(self):
        return [n for n, _ in self.model.named_parameters()]

    def get(self, name):
        return dict(self.model.named_parameters())[name].detach().float().cpu().numpy()

    def load(self, init):
        """Copies init[name] (NumPy) into each parameter; a 2-D array given transposed is
        transposed back (and its name remembered). Raises ValueError naming the parameter."""
        with self.torch.no_grad():
            for name, p in self.model.named_parameters():
                arr = init(name)
                if tuple(arr.shape) != tuple(p.shape):
                    if arr.ndim == 2 and tuple(arr.shape[::-1]) == tuple(p.shape):
                        arr = arr.T
                        self.transposed.append(name)
                    else:
                        raise ValueError(f"parameter {name}: reprise's shape {list(arr.shape)}, "
                                         f"torch's {list(p.shape)}")
                p.copy_(self.torch.from_numpy(arr.copy()))

    def step(self, tokens, targets):
        torch, a = self.torch, self.a
        for g in self.opt.param_groups:
            g["lr"] = a.lr * self.lr_factor(self.step_count, a.lr_warmup, a.steps,
                                            a.min_lr_factor)
        x = torch.from_numpy(tokens).long().to(self.device)
        y = torch.from_numpy(targets).long().to(self.device)
        self.opt.zero_grad(set_to_none=True)
        with self.autocast(self.precision, self.device):
            loss = self.model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.step_count += 1
        return float(loss.detach())


def import_reprise():
    """The reprise module, or raises ImportError saying where it was looked for."""
    tried = [p for p in (os.environ.get("REPRISE_PYTHON_PATH"),
                         os.path.join(ROOT, ".stage", "python"),
                         os.path.join(ROOT, "build", "python")) if p]
    for path in tried:
        if os.path.isdir(os.path.join(path, "reprise")):
            sys.path.insert(0, path)
            break
    try:
        import reprise
    except ImportError as e:
        raise ImportError(f"the reprise module does not import ({e}); looked in "
                          f"{', '.join(tried)}: build the _reprise target for this Python "
                          f"({sys.version.split()[0]}) and set REPRISE_PYTHON_PATH") from e
    return reprise


class RepriseSide:
    """reprise.models.build_gpt2 trained by reprise.Trainer with the same optimizer."""

    def __init__(self, reprise, a, precision, non_finite=None):
        fields = dict(batch=a.batch, seq=a.seq, max_positions=a.seq, vocab=a.vocab,
                      layers=a.layers, heads=a.heads, width=a.width)
        try:
            cfg = reprise.models.Gpt2Config(**fields)
        except TypeError:  # a binding without keyword construction: set the fields one by one
            cfg = reprise.models.Gpt2Config()
            for name, value in fields.items():
                setattr(cfg, name, value)
        self.model = reprise.models.build_gpt2(cfg)
        optimizer = reprise.OptimizerOptions(
            kind=reprise.OptimizerKind.adamw, learning_rate=a.lr, beta1=0.9, beta2=0.95,
            epsilon=1e-8, weight_decay=a.weight_decay, decay_rank1=False, max_grad_norm=1.0,
            schedule=reprise.LrSchedule(warmup_steps=a.lr_warmup, decay=reprise.LrDecay.cosine,
                                        total_steps=a.steps, min_lr_factor=a.min_lr_factor))
        dtype = reprise.DType.bfloat16 if precision == "bf16" else reprise.DType.float32
        options = reprise.TrainOptions(optimizer=optimizer, allow_tf32=False, compute_dtype=dtype)
        if non_finite:  # the non-finite guard's policy (TrainOptions::numerics.non_finite)
            guard = reprise._reprise.NonFiniteOptions()
            guard.policy = getattr(reprise._reprise.NonFinitePolicy, non_finite)
            options.numerics.non_finite = guard
        self.trainer = reprise.Trainer.create(self.model.graph, self.model.loss, options)

    def names(self):
        return list(self.trainer.parameter_names())

    def get(self, name):
        import numpy as np
        return np.asarray(self.trainer.get_parameter(name), dtype=np.float32)

    def step(self, tokens, targets):
        self.trainer.set_input("tokens", tokens)
        self.trainer.set_input("targets", targets)
        self.trainer.step()
        return float(self.trainer.loss())


def run_reprise(a, precision, reprise, device, data, non_finite):
    label = "reprise" + (f" (non_finite={non_finite})" if non_finite else "")
    try:
        return run_pair(a, precision, lambda: RepriseSide(reprise, a, precision, non_finite),
                        label, device, data)
    except Exception as e:  # a missing binding or a Status: a FAIL row naming it
        return {"precision": precision, "tolerance": a.tol[precision], "ours": label,
                "error": f"{type(e).__name__}: {e}"}


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare_params(ours, ref, names):
    """(relative 2-norm over all parameters, {name: relative 2-norm of that tensor}).

    The key third of each c_attn bias is left out of the total (shown as "<name>[k]"): adding
    a constant to every key shifts a row's scores by the same amount, which softmax ignores, so
    its gradient is zero but for rounding and AdamW turns that noise into full-size steps of
    either sign. Both sides are right, they only round differently."""
    import numpy as np
    per, num, den = {}, 0.0, 0.0
    for name in names:
        x, y = ours.get(name).astype(np.float64), ref.get(name).astype(np.float64)
        if x.shape != y.shape and x.ndim == 2 and x.T.shape == y.shape:
            x = x.T
        parts = [(name, x, y, True)]
        if name.endswith("attn.c_attn.bias"):
            c = x.shape[0] // 3
            keep = np.r_[0:c, 2 * c:3 * c]
            parts = [(name, x[keep], y[keep], True), (name + "[k]", x[c:2 * c], y[c:2 * c], False)]
        for label, u, v, gated in parts:
            d, n = float(np.sum((u - v) ** 2)), float(np.sum(v ** 2))
            per[label] = math.sqrt(d / max(n, 1e-30))
            if gated:
                num, den = num + d, den + n
    return math.sqrt(num / max(den, 1e-30)), per


def check_names(ours_names, torch_names):
    """(problems, extras): why the two models' parameters cannot be compared, as sentences
    (empty when every torch parameter has its reprise twin and the output projection is tied),
    and the names reprise has beyond torch's (shown, not compared: the training graph may hold
    tensors of its own)."""
    ours, theirs = set(ours_names), set(torch_names) - {TIED}
    problems = []
    if TIED in ours:
        problems.append(f"reprise has a separate {TIED}: the output projection is not tied to "
                        "transformer.wte.weight")
    for n in sorted(theirs - ours):
        problems.append(f"torch's parameter {n} is missing in reprise")
    return problems, sorted(ours - theirs - {TIED})


def run_pair(a, precision, make_ours, ours_label, device, data):
    """Trains ours and torch from ours' initial weights; returns the record of one precision."""
    ours = make_ours()
    record = {"precision": precision, "tolerance": a.tol[precision], "ours": ours_label}
    ref = TorchSide(a, precision, device, init=ours.get)
    problems, extras = check_names(ours.names(), ref.names())
    if problems:
        record["error"] = "; ".join(problems)
        return record
    if extras:
        record["not_compared"] = extras
    record["transposed"] = ref.transposed
    record["losses"] = [[ours.step(x, y), ref.step(x, y)] for x, y in data]
    names = [n for n in ref.names() if n != TIED]
    record["params_rel"], record["params_per_tensor"] = compare_params(ours, ref, names)
    return record


def torch_yardstick(a, device, data):
    """PyTorch's bf16 losses against its fp32 ones from the same start: what bf16 itself costs."""
    first = TorchSide(a, "fp32", device)
    second = TorchSide(a, "bf16", device, init=first.get)
    return [[second.step(x, y), first.step(x, y)] for x, y in data]


def verdicts(record):
    """[(check, value, tolerance, ok)] of one record."""
    tol = record["tolerance"]
    if "error" in record:
        return [("setup", record["error"], None, False)]
    worst = max(rel(o, t) for o, t in record["losses"])
    out = [("loss, worst step", worst, tol, worst <= tol and all(math.isfinite(o) for o, _ in
                                                                 record["losses"])),
           ("parameters, all", record["params_rel"], tol, record["params_rel"] <= tol)]
    return out


def print_record(record):
    p = record["precision"]
    print(f"\n== {p}: {record['ours']} against torch (tolerance {record['tolerance']:g} relative)")
    if "error" in record:
        print(f"  cannot compare: {record['error']}")
        return
    if record.get("not_compared"):
        print(f"  (reprise's other tensors, not compared: {', '.join(record['not_compared'])})")
    if record.get("transposed"):
        print(f"  (given transposed, and transposed back: {', '.join(record['transposed'])})")
    print(f"  {'step':>4}  {'ours':>12}  {'torch':>12}  {'relative':>10}")
    for i, (o, t) in enumerate(record["losses"]):
        print(f"  {i:>4}  {o:>12.6f}  {t:>12.6f}  {rel(o, t):>10.2e}")
    flag = 10 * record["tolerance"]
    worst = sorted(record["params_per_tensor"].items(), key=lambda kv: -kv[1])
    print("  parameters: relative 2-norm of the difference, all together "
          f"{record['params_rel']:.2e}; worst tensors:")
    for name, r in worst[:5]:
        note = ("  (not counted: zero gradient but for rounding)" if name.endswith("[k]") else
                "  (over 10x the tolerance)" if r > flag else "")
        print(f"    {name:<40} {r:.2e}{note}")


def main():
    a = parse_args()
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError as e:
        print(f"gpt2_torch_check: cannot run: {e}", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not a.self_test:
        print("gpt2_torch_check: cannot run: no CUDA GPU visible to torch", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    data = batches(a)
    records = []
    if a.self_test:
        for p in a.precision:
            records.append(run_pair(a, p, lambda: TorchSide(a, "fp32", device),
                                    f"torch fp32 ({device})", device, data))
    else:
        try:
            reprise = import_reprise()
        except ImportError as e:
            print(f"gpt2_torch_check: cannot run: {e}", file=sys.stderr)
            return 2
        if reprise.no_gpu_reason():
            print(f"gpt2_torch_check: cannot run: reprise sees no GPU: {reprise.no_gpu_reason()}",
                  file=sys.stderr)
            return 2
        for p in a.precision:
            record = run_reprise(a, p, reprise, device, data, a.non_finite)
            records.append(record)
            if "error" in record and not a.non_finite:
                # Still compare the numbers where only the non-finite guard's check stood in the
                # way: the guard changes no step that is finite. The failure above stands.
                again = run_reprise(a, p, reprise, device, data, "ignore")
                if "error" not in again:
                    records.append(again)
    for r in records:
        print_record(r)
    yardstick = torch_yardstick(a, device, data) if "bf16" in a.precision else None
    if yardstick:
        worst = max(rel(o, t) for o, t in yardstick)
        print(f"\nyardstick: torch bf16 against torch fp32, worst step's loss {worst:.2e} relative")

    rows = [(r["precision"], r["ours"], *v) for r in records for v in verdicts(r)]
    print(f"\n{'precision':<10} {'ours':<28} {'check':<18} {'value':>10} {'tolerance':>10}  result")
    for p, ours, check, value, tol, ok in rows:
        shown = f"{value:.2e}" if isinstance(value, float) else "error"
        print(f"{p:<10} {ours:<28} {check:<18} {shown:>10} "
              f"{'' if tol is None else f'{tol:.0e}':>10}  {'PASS' if ok else 'FAIL'}")
    passed = all(ok for *_, ok in rows)
    print(f"\ngpt2_torch_check: {'PASS' if passed else 'FAIL'} "
          f"({sum(ok for *_, ok in rows)} of {len(rows)} checks)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "gpt2_torch_check.py", "torch": torch.__version__,
                       "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
                       "config": {k: getattr(a, k) for k in (
                           "steps", "batch", "seq", "layers", "heads", "width", "vocab", "lr",
                           "lr_warmup", "min_lr_factor", "weight_decay", "seed")},
                       "records": records, "yardstick_bf16_vs_fp32": yardstick,
                       "passed": passed}, f, indent=2)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
