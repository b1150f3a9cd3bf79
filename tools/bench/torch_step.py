"""What the PyTorch peer benchmarks (torch_mlp.py, torch_resnet.py) share: PyTorch's documented
whole-step CUDA graph capture, CUDA-event timing after warm-up, and one mode's measurement with
its peak memory. Each step's loss is `loss_of(model, x, y)`; inputs rotate over `xs`, `ys`."""
import gc, inspect, statistics, time

try:
    import torch
except ImportError:  # the scripts report it
    torch = None

CAPTURE_WARMUP = 3  # side-stream iterations before capture (as in the PyTorch docs)


def backward_and_step(opt, loss, scaler=None):
    """loss.backward(); opt.step(), or with a torch.amp.GradScaler: the scaled backward, its
    step (skipped on inf/NaN gradients) and the scale's update."""
    if scaler is None:
        loss.backward()
        opt.step()
        return
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


def capture_step(model, opt, loss_of, xs, ys, scaler=None):
    """Whole-step CUDA graph capture, following the recipe in PyTorch's CUDA semantics docs. With
    a GradScaler the optimizer must be a fused one (its step then reads the scaler's found-inf
    flag on the device; otherwise GradScaler.step syncs with the host and cannot be captured)."""
    static_x, static_y = xs[0].clone(), ys[0].clone()  # clone keeps channels_last
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up (lazy init, cuDNN benchmark, momentum buffers) outside
        for _ in range(CAPTURE_WARMUP):
            opt.zero_grad(set_to_none=True)
            backward_and_step(opt, loss_of(model, static_x, static_y), scaler)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    # zero_grad(set_to_none=True) right before capture, as in the docs: the captured
    # backward then allocates .grad from the graph's pool and *writes* (not accumulates)
    # it on every replay, which is what zero_grad + backward does each eager step.
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_of(model, static_x, static_y)
        backward_and_step(opt, static_loss, scaler)

    def step(i):
        static_x.copy_(xs[i % len(xs)])
        static_y.copy_(ys[i % len(ys)])
        g.replay()
    step.keep_alive = (g, static_loss)
    return step


def capturable_sgd_kwargs():
    """SGD's keyword for capture where this torch has it (else foreach), and its name."""
    if "capturable" in inspect.signature(torch.optim.SGD).parameters:
        return {"capturable": True}, "SGD(capturable=True)"
    return {"foreach": True}, "SGD(foreach=True)"


def time_steps(step, warmup, iters, peaks=None):
    """CUDA-event times of `iters` steps after `warmup` untimed ones. With `peaks` (a dict), its
    "setup_peak_bytes" is the allocation peak up to the end of the warm-up (compiling, cuDNN's
    autotuning) and "peak_bytes" that of the timed steps alone: what the step itself holds."""
    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    if peaks is not None:
        peaks["setup_peak_bytes"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        step(warmup + i)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def run_mode(mode, setup, warmup, iters, progress=lambda msg: None):
    """Sets up `mode` with setup() -> (step, info), times it, and returns median and p90 ms, peak
    memory of the timed steps (with base_bytes: what earlier modes left allocated; and the peak of
    setup and warm-up), and setup time, or the error."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base, step = torch.cuda.memory_allocated(), None
    try:
        progress(f"{mode}: setting up")
        t0 = time.perf_counter()
        step, info = setup()
        torch.cuda.synchronize()
        setup_s = time.perf_counter() - t0
        progress(f"{mode}: set up in {setup_s:.1f} s; {warmup} warm-up and {iters} timed steps")
        peaks = {}
        ms = sorted(time_steps(step, warmup, iters, peaks))
        return {"median_ms": statistics.median(ms),
                "p90_ms": statistics.quantiles(ms, n=10, method="inclusive")[8],
                "peak_bytes": torch.cuda.max_memory_allocated(), "base_bytes": base,
                "setup_peak_bytes": peaks["setup_peak_bytes"], "setup_s": setup_s, **info}
    except Exception as e:  # report and go on with the next mode
        return {"error": f"{type(e).__name__}: {e}"}
    finally:
        del step
        if mode.startswith("compile"):
            torch._dynamo.reset()
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
