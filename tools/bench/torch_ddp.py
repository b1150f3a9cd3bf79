#!/usr/bin/env python3
"""PyTorch DDP peer of reprise-dp-bench: data-parallel scaling on the GPUs of one host.

No torchrun: torch.multiprocessing.spawn starts one process per GPU, joined by the NCCL backend
over a localhost TCP store. Each rank trains --model (torchvision ResNet-<depth> or a ReLU MLP of
--depth x --width) at --batch per GPU: forward, CrossEntropyLoss (mean), backward with DDP's
bucketed all-reduce (bucket_cap_mb, gradient_as_bucket_view), SGD(momentum=0.9). Modes:
  eager          plain loop
  graph          the whole step (forward, backward with DDP's all-reduces, optimizer) captured in
                 one torch.cuda.CUDAGraph after warm-up on a side stream (PyTorch's recipe for DDP
                 capture: TORCH_NCCL_ASYNC_ERROR_HANDLING=0, 11+ warm-up iterations), replayed
  compile_graph  the same with the model torch.compile'd (max-autotune-no-cudagraphs)
A mode that fails prints its error and the others go on. For each mode and rank count (1 and
--gpus): the median step time over ranks' slowest, images/s, scaling efficiency (images/s over
N x the 1-GPU DDP run's) and exposed communication (step time over the 1-GPU run's). One line
each on stdout:
  torch_ddp <mode> gpus=2 batch=32 median_ms=X images_per_s=Y efficiency=Z exposed_comm_ms=W

  python3 tools/bench/torch_ddp.py --model resnet --depth 50 --batch 32 --gpus 2 --tf32
"""
import argparse, json, os, socket, sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

MODES = ("eager", "graph", "compile_graph")


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
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--modes", default="eager,graph,compile_graph")
    p.add_argument("--json", default="")
    return p.parse_args(argv)


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
    y = torch.randint(0, args.classes, (args.batch,), generator=g).to(device)
    return x, y


def run_mode(args, mode, rank, world, device):
    torch.manual_seed(0)
    model = build_model(args).to(device)
    # DDP on one GPU too: the 1-GPU run is DDP's own baseline. For whole-step capture DDP is
    # built in a side stream (PyTorch's recipe for capturing DDP's backward).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[rank], bucket_cap_mb=args.bucket_mb, gradient_as_bucket_view=True)
    torch.cuda.current_stream().wait_stream(side)
    step_model = (torch.compile(model, mode="max-autotune-no-cudagraphs")
                  if mode == "compile_graph" else model)
    try:  # capturable where this torch's SGD has it (graph modes), else foreach.
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                              **({"capturable": True} if mode != "eager" else {"foreach": True}))
    except TypeError:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    loss_fn = nn.CrossEntropyLoss()
    x, y = make_batch(args, device, rank)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(step_model(x), y)
        loss.backward()
        opt.step()
        return loss

    if mode == "eager":
        for _ in range(args.warmup):
            step()
        run = step
    else:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(11, args.warmup)):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        run = graph.replay
    torch.cuda.synchronize()
    times = []
    for _ in range(args.iters):
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
    device = torch.device("cuda", rank)
    for mode in args.modes.split(","):
        try:
            ms = run_mode(args, mode, rank, world, device)
            err = ""
        except Exception as e:  # A mode that cannot run is reported, the others go on.
            ms, err = float("nan"), f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        gathered = [None] * world
        dist.all_gather_object(gathered, (ms, err))
        if rank == 0:
            results[mode] = gathered
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
        base = max(ms for ms, _ in by_count[1][mode])
        for n in counts:
            ranks = by_count[n][mode]
            errors = [e for _, e in ranks if e]
            if errors:
                print(f"torch_ddp {mode} gpus={n} batch={args.batch} error='{errors[0]}'")
                out.append({"mode": mode, "gpus": n, "error": errors[0]})
                continue
            ms = max(m for m, _ in ranks)
            rate = n * args.batch * 1000.0 / ms
            eff = rate / (n * args.batch * 1000.0 / base)
            exposed = max(0.0, ms - base)
            print(f"torch_ddp {mode} gpus={n} batch={args.batch} median_ms={ms:.3f} "
                  f"images_per_s={rate:.1f} efficiency={eff:.3f} exposed_comm_ms={exposed:.3f}")
            out.append({"mode": mode, "gpus": n, "median_ms": ms, "images_per_s": rate,
                        "efficiency": eff, "exposed_comm_ms": exposed})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": out}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
