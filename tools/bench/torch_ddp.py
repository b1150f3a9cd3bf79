#!/usr/bin/env python3
"""PyTorch DDP peer of reprise-dp-bench: data-parallel scaling on the GPUs of one host.

No torchrun: torch.multiprocessing.spawn starts one process per GPU, joined by the NCCL backend
over a localhost TCP store (plus a gloo group that only carries each mode's outcome, so that a
mode that broke NCCL cannot stop the report). Each rank trains --model (torchvision
ResNet-<depth> or a ReLU MLP of --depth x --width) at --batch per GPU: forward, CrossEntropyLoss
(mean), backward with DDP's bucketed all-reduce (bucket_cap_mb, gradient_as_bucket_view),
SGD(lr=0.01, momentum=0.9). Modes:
  eager    plain loop, SGD(foreach=True)
  graph    the whole step (forward, backward with DDP's all-reduces, optimizer) captured in one
           torch.cuda.CUDAGraph after warm-up on a side stream (PyTorch's recipe for DDP capture:
           DDP built on the side stream, TORCH_NCCL_ASYNC_ERROR_HANDLING=0, 11+ warm-up
           iterations), replayed; SGD(capturable=True) where this torch has it, else foreach
  compile  torch.compile of the DDP model (--compile-mode, default max-autotune-no-cudagraphs:
           DDPOptimizer splits the graph at bucket boundaries so the all-reduces still overlap
           the backward) with SGD(fused=True), its whole step captured the same way. Where the
           capture fails, it says why on stderr and times the compiled step uncaptured, on a
           fresh model (captured=no in its line). Compiling takes minutes for ResNet-50.
(compile_graph, this script's older name for compile, is still accepted.) A mode that fails
prints its error and the others go on. For each mode and rank count (1 and --gpus): the median
step time (the slowest rank's), images/s, scaling efficiency (images/s over N x the 1-GPU DDP
run's) and exposed communication (step time over the 1-GPU run's). One line each on stdout:
  torch_ddp <mode> gpus=2 batch=32 median_ms=X images_per_s=Y efficiency=Z exposed_comm_ms=W
            optimizer=... captured=yes|no
  torch_ddp <mode> gpus=2 batch=32 error='...'

  python3 tools/bench/torch_ddp.py --model resnet --depth 50 --batch 32 --gpus 2 --tf32 \\
      --modes eager,graph,compile
"""
import argparse, gc, inspect, json, os, socket, sys, time

import torch
import torch._dynamo  # Reset between modes (in a function, the import would shadow torch).
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

MODES = ("eager", "graph", "compile")
ALIASES = {"compile_graph": "compile"}
DDP_CAPTURE_WARMUP = 11  # DDP settles its buckets over the first iterations; capture after.


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch DDP data-parallel benchmark (one host)")
    p.add_argument("--model", default="resnet", choices=("resnet", "mlp"))
    p.add_argument("--depth", type=int, default=50)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=32, help="per GPU")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--gpus", type=int, default=0, help="0: every visible GPU")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--bf16", action="store_true",
                   help="autocast to bfloat16, channels-last (ResNet), as reprise-dp-bench --bf16")
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--modes", default="eager,graph,compile")
    p.add_argument("--compile-mode", default="max-autotune-no-cudagraphs",
                   help="torch.compile's mode in the compile mode (not one with CUDA graphs of "
                        "its own: the whole step is captured here)")
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    modes = [ALIASES.get(m, m) for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"unknown mode(s) {','.join(unknown)}; choose from {','.join(MODES)}")
    args.modes = ",".join(modes)
    return args


def progress(rank, msg):
    if rank == 0:
        print(f"torch_ddp: {msg}", file=sys.stderr, flush=True)


def short(e):
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:300]


def build_model(args):
    if args.model == "resnet":
        import torchvision
        return getattr(torchvision.models, f"resnet{args.depth}")(num_classes=args.classes)
    layers, width = [], args.width
    for _ in range(args.depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, args.classes))
    return nn.Sequential(*layers)


def make_batch(args, device, rank):
    g = torch.Generator(device="cpu").manual_seed(100 + rank)
    shape = ((args.batch, 3, args.image_size, args.image_size) if args.model == "resnet"
             else (args.batch, args.width))
    x = torch.randn(shape, generator=g).to(device)
    if args.bf16 and args.model == "resnet":
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, args.classes, (args.batch,), generator=g).to(device)
    return x, y


def build_ddp(args, rank, device):
    """The same initial weights on every rank (DDP broadcasts rank 0's anyway), wrapped in DDP on
    a side stream (PyTorch's recipe for capturing DDP's backward). DDP on one GPU too: the 1-GPU
    run is DDP's own baseline."""
    torch.manual_seed(0)
    model = build_model(args).to(device)
    if args.bf16 and args.model == "resnet":
        model = model.to(memory_format=torch.channels_last)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[rank], bucket_cap_mb=args.bucket_mb, gradient_as_bucket_view=True)
    torch.cuda.current_stream().wait_stream(side)
    return model, side


def make_sgd(params, mode):
    """SGD(lr=0.01, momentum=0.9): fused in the compile mode, capturable in the graph mode where
    this torch has those, else foreach. Returns the optimizer and its name."""
    params, kw = list(params), {"lr": 0.01, "momentum": 0.9}
    accepted = inspect.signature(torch.optim.SGD).parameters
    wanted = {"compile": "fused", "graph": "capturable"}.get(mode)
    if wanted in accepted:
        try:
            return torch.optim.SGD(params, **kw, **{wanted: True}), f"SGD({wanted}=True)"
        except (RuntimeError, ValueError, TypeError) as e:
            print(f"torch_ddp {mode}: SGD({wanted}=True) refused ({short(e)}); using foreach",
                  file=sys.stderr)
    return torch.optim.SGD(params, **kw, foreach=True), "SGD(foreach=True)"


def make_step(model, opt, loss_fn, x, y, bf16=False):
    def step():
        # Gradients stay allocated (DDP's bucket views; the captured graph's own memory).
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def capture(step, side, warmup):
    """Warms `step` up on the side stream, then captures it whole; returns the replay."""
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(DDP_CAPTURE_WARMUP, warmup)):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay  # The bound method keeps the graph (and its memory pool) alive.


def agree(control, world, err):
    """Every rank's `err` ('' when fine), through the gloo group."""
    gathered = [None] * world
    dist.all_gather_object(gathered, err, group=control)
    return [e for e in gathered if e]


def setup_mode(args, mode, rank, world, device, control):
    """The step to time for `mode`, and what to report with it."""
    loss_fn = nn.CrossEntropyLoss()
    x, y = make_batch(args, device, rank)
    model, side = build_ddp(args, rank, device)
    if mode == "eager":
        opt, name = make_sgd(model.parameters(), mode)
        step = make_step(model, opt, loss_fn, x, y, args.bf16)
        for _ in range(args.warmup):
            step()
        return step, {"optimizer": name, "captured": "no"}
    if mode == "graph":
        opt, name = make_sgd(model.parameters(), mode)
        return capture(make_step(model, opt, loss_fn, x, y, args.bf16), side, args.warmup), {
            "optimizer": name, "captured": "yes"}

    # compile: the compiled DDP model's whole step captured where that works.
    compiled = torch.compile(model, mode=args.compile_mode)
    opt, name = make_sgd(model.parameters(), mode)
    progress(rank, f"compile: compiling ({args.compile_mode}) in the warm-up; can take minutes")
    t0 = time.perf_counter()
    try:
        step = make_step(compiled, opt, loss_fn, x, y, args.bf16)
        replay, err = capture(step, side, args.warmup), ""
    except Exception as e:  # Reported; every rank then takes the same way on.
        replay, err = None, short(e)
    errors = agree(control, world, err)
    progress(rank, f"compile: warm-up and capture took {time.perf_counter() - t0:.1f} s")
    if not errors:
        return replay, {"optimizer": name, "captured": "yes", "compile_mode": args.compile_mode}
    # What the failed capture left (DDP's reducer mid-iteration, a half-recorded graph) is not
    # reused: a fresh model, compiled again (the compiled code is cached), runs uncaptured.
    progress(rank, f"compile: whole-step CUDA graph capture failed ({errors[0]}); timing the "
                   "compiled step without capture")
    del replay, compiled, opt, model
    gc.collect()
    torch.cuda.synchronize()
    model, side = build_ddp(args, rank, device)
    compiled = torch.compile(model, mode=args.compile_mode)
    opt, name = make_sgd(model.parameters(), mode)
    step = make_step(compiled, opt, loss_fn, x, y, args.bf16)
    for _ in range(args.warmup):
        step()
    return step, {"optimizer": name, "captured": "no", "compile_mode": args.compile_mode,
                  "capture_error": errors[0]}


def time_step(run, iters):
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def worker(rank, world, args, port, results):
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")  # Needed to capture NCCL.
    torch.cuda.set_device(rank)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))
    control = dist.new_group(backend="gloo")
    device = torch.device("cuda", rank)
    for mode in args.modes.split(","):
        ms, info, err = float("nan"), {}, ""
        try:
            run, info = setup_mode(args, mode, rank, world, device, control)
            ms = time_step(run, args.iters)
            del run
        except Exception as e:  # A mode that cannot run is reported, the others go on.
            err = short(e)
        gathered = [None] * world
        dist.all_gather_object(gathered, (ms, err, info), group=control)
        if rank == 0:
            results[mode] = gathered
        if mode == "compile":
            torch._dynamo.reset()  # Frees the compiled code before the next mode.
        gc.collect()
        torch.cuda.empty_cache()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(args, world):
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(worker, args=(world, args, free_port(), results), nprocs=world, join=True)
        return dict(results)


def main():
    args = parse_args()
    visible = torch.cuda.device_count()
    if visible == 0:
        print("torch_ddp: no CUDA device", file=sys.stderr)
        return 1
    gpus = args.gpus or visible
    counts = [1] + ([gpus] if gpus > 1 else [])
    by_count = {n: measure(args, n) for n in counts}
    out = []
    for mode in args.modes.split(","):
        base_ranks = by_count[1][mode]
        base = (None if any(e for _, e, _ in base_ranks)
                else max(ms for ms, _, _ in base_ranks))
        for n in counts:
            ranks = by_count[n][mode]
            errors = [e for _, e, _ in ranks if e]
            if errors:
                print(f"torch_ddp {mode} gpus={n} batch={args.batch} error='{errors[0]}'")
                out.append({"mode": mode, "gpus": n, "error": errors[0]})
                continue
            ms = max(m for m, _, _ in ranks)
            info = ranks[0][2]
            rate = n * args.batch * 1000.0 / ms
            row = {"mode": mode, "gpus": n, "median_ms": ms, "images_per_s": rate, **info}
            line = (f"torch_ddp {mode} gpus={n} batch={args.batch} median_ms={ms:.3f} "
                    f"images_per_s={rate:.1f}")
            if base is not None:  # Scaling needs this mode's own 1-GPU run.
                row["efficiency"] = rate / (n * args.batch * 1000.0 / base)
                row["exposed_comm_ms"] = max(0.0, ms - base)
                line += (f" efficiency={row['efficiency']:.3f}"
                         f" exposed_comm_ms={row['exposed_comm_ms']:.3f}")
            print(f"{line} optimizer={info.get('optimizer', '?')} "
                  f"captured={info.get('captured', '?')}")
            out.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": out}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
