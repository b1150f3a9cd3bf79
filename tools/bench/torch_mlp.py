#!/usr/bin/env python3
"""PyTorch reference timings for one MLP training step on one CUDA GPU.

One step: zero_grad; forward through `depth` x [Linear(width, width) + ReLU] and a
final Linear(width, classes); CrossEntropyLoss (mean); backward; SGD(lr, momentum,
weight_decay) step. fp32, TF32 off unless --tf32. Modes:
  eager          plain Python loop, SGD(foreach=True)
  graph          whole step captured in one torch.cuda.CUDAGraph (PyTorch's documented
                 recipe) and replayed; SGD(capturable=True) if available, else foreach
  compile_graph  torch.compile(mode="max-autotune-no-cudagraphs") + SGD(fused=True),
                 captured whole-step the same way
Each step is timed with CUDA events after warm-up (graph modes include the copy of the
next batch into the static inputs); inputs rotate over a few pre-generated random
batches. peak_bytes = torch.cuda.max_memory_allocated over the timed steps (setup_peak_bytes:
over setup and warm-up), including those batches (config.input_bytes) and whatever earlier
modes left allocated (base_bytes, e.g. cuBLAS workspaces; use --modes X for one mode per
process). Exit status: 0 ok, 1 cannot run, 2 some mode failed.

  python3 tools/bench/torch_mlp.py --depth 4 --width 1024 --batch 256 --json t.json
"""
import argparse, datetime, json, sys

import torch_step

try:
    import torch
    from torch import nn
except ImportError as e:  # reported in main()
    torch, _IMPORT_ERROR = None, str(e)

MODES = ("eager", "graph", "compile_graph")
NUM_BATCHES = 4     # distinct input batches, rotated


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch MLP training-step benchmark (one CUDA GPU)")
    p.add_argument("--depth", type=int, default=4, help="hidden Linear+ReLU layers")
    p.add_argument("--width", type=int, default=1024, help="input and hidden width")
    p.add_argument("--batch", type=int, default=256)
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
    if a.iters < 2 or a.warmup < 0 or a.depth < 0 or min(a.width, a.batch, a.classes) < 1:
        p.error("need --iters >= 2, --warmup >= 0, --depth >= 0, positive width/batch/classes")
    return a


def build_model(a):
    torch.manual_seed(0)  # same initial weights in every mode
    layers = []
    for _ in range(a.depth):
        layers += [nn.Linear(a.width, a.width), nn.ReLU()]
    layers.append(nn.Linear(a.width, a.classes))
    return nn.Sequential(*layers).cuda()


def make_sgd(params, a, **kw):
    return torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay, **kw)


def setup_eager(a, xs, ys):
    model, loss_fn = build_model(a), nn.CrossEntropyLoss()
    opt = make_sgd(model.parameters(), a, foreach=True)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(xs[i % NUM_BATCHES]), ys[i % NUM_BATCHES]).backward()
        opt.step()
    return step, {"optimizer": "SGD(foreach=True)"}


def loss_of(model, x, y):
    return nn.CrossEntropyLoss()(model(x), y)


def setup_graph(a, xs, ys):
    model = build_model(a)
    kw, name = torch_step.capturable_sgd_kwargs()
    opt = make_sgd(model.parameters(), a, **kw)
    return torch_step.capture_step(model, opt, loss_of, xs, ys), {"optimizer": name}


def setup_compile_graph(a, xs, ys):
    model = torch.compile(build_model(a), mode="max-autotune-no-cudagraphs")
    opt = make_sgd(model.parameters(), a, fused=True)
    # Compile (forward and backward) once on the default stream before the capture recipe.
    opt.zero_grad(set_to_none=True)
    nn.CrossEntropyLoss()(model(xs[0]), ys[0]).backward()
    opt.step()
    torch.cuda.synchronize()
    return torch_step.capture_step(model, opt, loss_of, xs, ys), {"optimizer": "SGD(fused=True)"}


SETUP = {"eager": setup_eager, "graph": setup_graph, "compile_graph": setup_compile_graph}


def main():
    a = parse_args()
    config = {k: getattr(a, k) for k in ("depth", "width", "batch", "classes", "iters", "warmup",
                                         "modes", "lr", "momentum", "weight_decay", "tf32")}
    config["dtype"] = "float32"
    if torch is None or not torch.cuda.is_available():
        why = f"torch is not installed ({_IMPORT_ERROR})" if torch is None else "no CUDA GPU visible"
        print(f"torch_mlp: error: {why}", file=sys.stderr)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"error": why, "config": config}, f, indent=2)
        return 1

    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    g = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randn(a.batch, a.width, device="cuda", generator=g) for _ in range(NUM_BATCHES)]
    ys = [torch.randint(0, a.classes, (a.batch,), device="cuda", generator=g) for _ in range(NUM_BATCHES)]
    config["input_bytes"] = sum(t.numel() * t.element_size() for t in xs + ys)

    results = {}
    for mode in a.modes:
        r = results[mode] = torch_step.run_mode(mode, lambda: SETUP[mode](a, xs, ys), a.warmup,
                                                a.iters)
        head = f"torch {mode} depth={a.depth} width={a.width} batch={a.batch}"
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
