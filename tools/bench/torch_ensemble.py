#!/usr/bin/env python3
"""PyTorch reference timings for one training step of an ensemble of K MLPs on one CUDA GPU.

Each model: `depth` x [Linear + ReLU] (input_features -> width -> ... -> width), a final
Linear(width, classes), CrossEntropyLoss (mean over its own batch), SGD with momentum
(dampening 0) on its own weights; model k sees its own batch. The total loss is the sum of the
models' losses, so each model's gradients are its own. fp32, TF32 off unless --tf32. Modes:
  loop       K nn.Sequential models in a Python loop, one backward of the summed loss,
             SGD(foreach=True) over all parameters
  vmap       torch.func.stack_module_state + vmap(grad(loss)) over the stacked weights, then
             the momentum update with torch._foreach ops
  bmm_graph  hand-written batched layers (torch.baddbmm over weights stacked [K, in, out]), the
             whole step captured in one torch.cuda.CUDAGraph and replayed (the recipe of
             torch_step.capture_step), SGD(capturable=True) where available
Timing and memory as torch_mlp.py (CUDA events per step after warm-up; inputs rotate over a few
pre-generated batches). Exit status: 0 ok, 1 cannot run, 2 some mode failed.

  python3 tools/bench/torch_ensemble.py --models 32 --input-features 64 --depth 2 --width 256 \\
      --batch 64 --json t.json
"""
import argparse, datetime, json, sys

import torch_step

try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError as e:  # reported in main()
    torch, _IMPORT_ERROR = None, str(e)

MODES = ("loop", "vmap", "bmm_graph")
NUM_BATCHES = 4  # distinct input batches, rotated


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch ensemble training-step benchmark (one GPU)")
    p.add_argument("--models", type=int, default=32, help="models in the ensemble (K)")
    p.add_argument("--input-features", type=int, default=64)
    p.add_argument("--depth", type=int, default=2, help="hidden Linear+ReLU layers per model")
    p.add_argument("--width", type=int, default=256, help="hidden width")
    p.add_argument("--batch", type=int, default=64, help="batch of each model")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--iters", type=int, default=200, help="timed steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before timing")
    p.add_argument("--modes", default=",".join(MODES), help="comma list of " + ", ".join(MODES))
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (default: off)")
    p.add_argument("--json", metavar="FILE", help="write results as JSON here")
    a = p.parse_args()
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.modes if m not in MODES]
    if bad or not a.modes:
        p.error(f"--modes: unknown {bad}; choose from {', '.join(MODES)}")
    if a.iters < 2 or a.warmup < 0 or a.depth < 0 or min(a.models, a.input_features, a.width,
                                                          a.batch, a.classes) < 1:
        p.error("need --iters >= 2, --warmup >= 0, --depth >= 0 and positive sizes")
    return a


def sizes(a):
    return [a.input_features] + [a.width] * a.depth + [a.classes]


def build_mlp(a):
    dims, layers = sizes(a), []
    for i, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i + 1 < len(dims) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).cuda()


def build_models(a):
    torch.manual_seed(0)  # same initial weights in every mode
    return [build_mlp(a) for _ in range(a.models)]


def make_sgd(params, a, **kw):
    return torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay, **kw)


def setup_loop(a, xs, ys):
    models = build_models(a)
    opt = make_sgd([p for m in models for p in m.parameters()], a, foreach=True)

    def step(i):
        x, y = xs[i % NUM_BATCHES], ys[i % NUM_BATCHES]
        opt.zero_grad(set_to_none=True)
        total = sum(F.cross_entropy(m(x[k]), y[k]) for k, m in enumerate(models))
        total.backward()
        opt.step()
    return step, {"optimizer": "SGD(foreach=True)"}


def setup_vmap(a, xs, ys):
    import copy
    from torch.func import functional_call, grad, stack_module_state, vmap
    models = build_models(a)
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    names = list(params)
    weights = [params[n].detach() for n in names]  # updated in place below
    moms = [torch.zeros_like(w) for w in weights]

    def loss_one(p, b, x, y):
        return F.cross_entropy(functional_call(base, (p, b), (x,)), y)

    grads_of = vmap(grad(loss_one))

    def step(i):
        g = grads_of(dict(zip(names, weights)), buffers, xs[i % NUM_BATCHES], ys[i % NUM_BATCHES])
        grads = [g[n] for n in names]
        with torch.no_grad():
            if a.weight_decay:
                torch._foreach_add_(grads, weights, alpha=a.weight_decay)
            torch._foreach_mul_(moms, a.momentum)
            torch._foreach_add_(moms, grads)
            torch._foreach_add_(weights, moms, alpha=-a.lr)
    return step, {"optimizer": "torch._foreach momentum SGD"}


def bmm_ensemble(a):
    """K MLPs as stacked weights [K, in, out] and biases [K, 1, out], one baddbmm per layer."""

    class BmmEnsemble(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            dims = sizes(a)
            self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
            for fan_in, fan_out in zip(dims[:-1], dims[1:]):
                bound = 1.0 / fan_in ** 0.5  # nn.Linear's U(+-1/sqrt(fan_in))
                self.weights.append(nn.Parameter(
                    torch.empty(a.models, fan_in, fan_out, device="cuda").uniform_(-bound, bound)))
                self.biases.append(nn.Parameter(
                    torch.empty(a.models, 1, fan_out, device="cuda").uniform_(-bound, bound)))

        def forward(self, x):  # x [K, B, in] -> logits [K, B, classes]
            last = len(self.weights) - 1
            for i, (w, b) in enumerate(zip(self.weights, self.biases)):
                x = torch.baddbmm(b, x, w)
                if i < last:
                    x = torch.relu(x)
            return x

    return BmmEnsemble()


def bmm_loss(model, x, y):
    logits = model(x)
    k, batch, classes = logits.shape
    per_row = F.cross_entropy(logits.reshape(k * batch, classes), y.reshape(k * batch),
                              reduction="none")
    return per_row.view(k, batch).mean(dim=1).sum()  # each model's mean, summed


def setup_bmm_graph(a, xs, ys):
    model = bmm_ensemble(a)
    kw, name = torch_step.capturable_sgd_kwargs()
    opt = make_sgd(model.parameters(), a, **kw)
    return torch_step.capture_step(model, opt, bmm_loss, xs, ys), {"optimizer": name}


SETUP = {"loop": setup_loop, "vmap": setup_vmap, "bmm_graph": setup_bmm_graph}


def main():
    a = parse_args()
    config = {k: getattr(a, k) for k in ("models", "input_features", "depth", "width", "batch",
                                         "classes", "iters", "warmup", "modes", "lr", "momentum",
                                         "weight_decay", "tf32")}
    config["dtype"] = "float32"
    if torch is None or not torch.cuda.is_available():
        why = f"torch is not installed ({_IMPORT_ERROR})" if torch is None else "no CUDA GPU visible"
        print(f"torch_ensemble: error: {why}", file=sys.stderr)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"error": why, "config": config}, f, indent=2)
        return 1

    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    g = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randn(a.models, a.batch, a.input_features, device="cuda", generator=g)
          for _ in range(NUM_BATCHES)]
    ys = [torch.randint(0, a.classes, (a.models, a.batch), device="cuda", generator=g)
          for _ in range(NUM_BATCHES)]
    config["input_bytes"] = sum(t.numel() * t.element_size() for t in xs + ys)

    results = {}
    for mode in a.modes:
        r = results[mode] = torch_step.run_mode(mode, lambda: SETUP[mode](a, xs, ys), a.warmup,
                                                a.iters)
        head = (f"torch {mode} models={a.models} input_features={a.input_features} "
                f"depth={a.depth} width={a.width} batch={a.batch}")
        if "error" in r:
            print(f"{head} error={r['error']!r}", flush=True)
        else:
            print(f"{head} median_ms={r['median_ms']:.4f} p90_ms={r['p90_ms']:.4f}", flush=True)

    if a.json:
        out = {"framework": "torch", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cuda": torch.version.cuda,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "config": config, "results": results}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if all("error" not in r for r in results.values()) else 2


if __name__ == "__main__":
    sys.exit(main())
