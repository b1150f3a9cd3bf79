#!/usr/bin/env python3
"""JAX reference timings for one MLP training step (one jax.jit function) on one GPU.

Same step as torch_mlp.py: forward through `depth` x [Linear(width, width) + ReLU]
and a final Linear(width, classes), softmax cross-entropy (mean over the batch),
gradients, and PyTorch-style SGD with momentum (dampening 0):
    g += weight_decay * p;  buf = momentum * buf + g;  p -= lr * buf
Params and momentum are pytrees donated to the step (donate_argnums). fp32 with
jax_default_matmul_precision="highest" (TF32 only with --tf32).

Timing (after warm-up; the first call, which compiles, is reported apart as compile_s):
  jit         wall clock around step(...) + block_until_ready on its outputs, per step: each
              step pays a host round trip, as a loop that reads its loss every step would.
  jit_queued  --iters steps queued asynchronously and blocked on once, in 5 rounds; the median
              round's time per step, as a loop that never waits on the device (the fair
              comparison with reprise's and torch's event-timed back-to-back steps).
Inputs rotate over a few pre-generated random batches on the device. peak_bytes is
the device allocator's peak_bytes_in_use (null where the backend does not report it).
Exit status: 0 ok, 1 cannot run (e.g. jax missing), 2 the mode failed.

  python3 tools/bench/jax_mlp.py --depth 4 --width 1024 --batch 256 --json j.json
"""
import argparse, datetime, json, statistics, sys, time

try:
    import jax
    import jax.numpy as jnp
except ImportError as e:  # reported in main()
    jax, _IMPORT_ERROR = None, str(e)

MODES = ("jit", "jit_queued")
NUM_BATCHES = 4  # distinct input batches, rotated


def parse_args():
    p = argparse.ArgumentParser(description="JAX MLP training-step benchmark (one GPU)")
    p.add_argument("--depth", type=int, default=4, help="hidden Linear+ReLU layers")
    p.add_argument("--width", type=int, default=1024, help="input and hidden width")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--iters", type=int, default=200, help="timed steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before timing")
    p.add_argument("--modes", default="jit", help="comma list of " + ", ".join(MODES))
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--tf32", action="store_true", help="matmul precision tensorfloat32 (default: highest)")
    p.add_argument("--json", metavar="FILE", help="write results as JSON here")
    a = p.parse_args()
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.modes if m not in MODES]
    if bad or not a.modes:
        p.error(f"--modes: unknown {bad}; choose from {', '.join(MODES)}")
    if a.iters < 2 or a.warmup < 0 or a.depth < 0 or min(a.width, a.batch, a.classes) < 1:
        p.error("need --iters >= 2, --warmup >= 0, --depth >= 0, positive width/batch/classes")
    return a


def init_params(key, a):
    """List of {"w": (fan_in, fan_out), "b": (fan_out,)}; U(+-1/sqrt(fan_in)) like nn.Linear."""
    sizes = [a.width] * (a.depth + 1) + [a.classes]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, kw, kb = jax.random.split(key, 3)
        bound = 1.0 / fan_in ** 0.5
        params.append({"w": jax.random.uniform(kw, (fan_in, fan_out), jnp.float32, -bound, bound),
                       "b": jax.random.uniform(kb, (fan_out,), jnp.float32, -bound, bound)})
    return params


def make_step(a):
    tree_map = jax.tree_util.tree_map

    def loss_fn(params, x, y):
        h = x
        for layer in params[:-1]:
            h = jax.nn.relu(h @ layer["w"] + layer["b"])
        logits = h @ params[-1]["w"] + params[-1]["b"]
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))

    def step(params, mom, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        if a.weight_decay:
            grads = tree_map(lambda g, p: g + a.weight_decay * p, grads, params)
        mom = tree_map(lambda m, g: a.momentum * m + g, mom, grads)  # buf=0 start == torch's buf=g
        params = tree_map(lambda p, m: p - a.lr * m, params, mom)
        return params, mom, loss

    return jax.jit(step, donate_argnums=(0, 1))


def block(tree):
    if hasattr(jax, "block_until_ready"):
        return jax.block_until_ready(tree)
    return jax.tree_util.tree_map(lambda t: t.block_until_ready(), tree)


def run_jit(a, dev, queued):
    key = jax.random.PRNGKey(0)
    key, pkey = jax.random.split(key)
    params = init_params(pkey, a)
    mom = jax.tree_util.tree_map(jnp.zeros_like, params)
    xs, ys = [], []
    for _ in range(NUM_BATCHES):
        key, kx, ky = jax.random.split(key, 3)
        xs.append(jax.random.normal(kx, (a.batch, a.width), jnp.float32))
        ys.append(jax.random.randint(ky, (a.batch,), 0, a.classes, jnp.int32))
    block((params, mom, xs, ys))
    step = make_step(a)

    t0 = time.perf_counter()
    params, mom, loss = block(step(params, mom, xs[0], ys[0]))  # compiles
    compile_s = time.perf_counter() - t0
    for i in range(1, a.warmup + 1):
        params, mom, loss = block(step(params, mom, xs[i % NUM_BATCHES], ys[i % NUM_BATCHES]))
    ms = []
    if queued:
        for _ in range(5):
            t0 = time.perf_counter()
            for i in range(a.iters):
                params, mom, loss = step(params, mom, xs[i % NUM_BATCHES], ys[i % NUM_BATCHES])
            params, mom, loss = block((params, mom, loss))
            ms.append((time.perf_counter() - t0) * 1e3 / a.iters)
    else:
        for i in range(a.warmup + 1, a.warmup + 1 + a.iters):
            t0 = time.perf_counter()
            params, mom, loss = block(step(params, mom, xs[i % NUM_BATCHES], ys[i % NUM_BATCHES]))
            ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    return {"median_ms": statistics.median(ms),
            "p90_ms": statistics.quantiles(ms, n=10, method="inclusive")[8],
            "peak_bytes": (stats or {}).get("peak_bytes_in_use"),
            "compile_s": compile_s, "final_loss": float(loss)}


def main():
    a = parse_args()
    config = {k: getattr(a, k) for k in ("depth", "width", "batch", "classes", "iters", "warmup",
                                         "modes", "lr", "momentum", "weight_decay", "tf32")}
    config["dtype"] = "float32"
    if jax is None:
        why = f"jax is not installed ({_IMPORT_ERROR})"
        print(f"jax_mlp: error: {why}", file=sys.stderr)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"error": why, "config": config}, f, indent=2)
        return 1

    precision = "tensorfloat32" if a.tf32 else "highest"
    jax.config.update("jax_default_matmul_precision", precision)
    config["matmul_precision"] = precision
    dev = jax.devices()[0]
    if dev.platform != "gpu":
        print(f"jax_mlp: warning: default device is {dev.platform}, not a GPU", file=sys.stderr)

    results = {}
    for mode in a.modes:
        try:
            r = run_jit(a, dev, queued=mode == "jit_queued")
        except Exception as e:  # report and go on
            r = {"error": f"{type(e).__name__}: {e}"}
        results[mode] = r
        head = f"jax {mode} depth={a.depth} width={a.width} batch={a.batch}"
        if "error" in r:
            print(f"{head} error={r['error']!r}", flush=True)
        else:
            print(f"{head} median_ms={r['median_ms']:.4f} p90_ms={r['p90_ms']:.4f}", flush=True)

    if a.json:
        import jaxlib
        out = {"framework": "jax", "gpu": dev.device_kind, "platform": dev.platform,
               "jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", None),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "config": config, "results": results}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if all("error" not in r for r in results.values()) else 2


if __name__ == "__main__":
    sys.exit(main())
