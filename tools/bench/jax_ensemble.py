#!/usr/bin/env python3
"""JAX reference timings for one training step of an ensemble of K MLPs: jit(vmap(step)).

The step of one model is jax_mlp.py's (input_features -> `depth` x [Linear(width) + ReLU] ->
Linear(classes), softmax cross-entropy, mean over its own batch, PyTorch-style SGD with
momentum); jax.vmap maps it over K models' stacked parameters, momenta and batches, and
jax.jit compiles the whole (params and momenta donated). Each model's gradients are those of its
own loss, as when the sum of the models' losses is differentiated. fp32, for each matmul precision
of --precisions: "highest" (exact fp32) and "default" (XLA's default, TF32 tensor cores on an
A100 or later). Modes:
  jit_vmap  the jitted step called `--iters` times from Python, queued asynchronously (JAX
            dispatch returns before the GPU is done), blocked on once at the end: ms per step =
            elapsed / iters. What a training loop gets, host dispatch included.
  scan      `--iters` steps inside one jitted lax.scan (one dispatch), blocked on once: the GPU's
            time per step without Python in the loop.
Each mode runs --rounds such timed rounds after warm-up and reports their median (compile apart).
Exit status: 0 ok, 1 cannot run (e.g. jax missing), 2 some mode failed.

  python3 tools/bench/jax_ensemble.py --models 32 --input-features 64 --depth 2 --width 256 \\
      --batch 64 --json j.json
"""
import argparse, datetime, json, statistics, sys, time

try:
    import jax
    import jax.numpy as jnp
except ImportError as e:  # reported in main()
    jax, _IMPORT_ERROR = None, str(e)

MODES = ("jit_vmap", "scan")
PRECISIONS = ("highest", "default", "tensorfloat32")
NUM_BATCHES = 4  # distinct input batches, rotated


def parse_args():
    p = argparse.ArgumentParser(description="JAX ensemble training-step benchmark (one GPU)")
    p.add_argument("--models", type=int, default=32, help="models in the ensemble (K)")
    p.add_argument("--input-features", type=int, default=64)
    p.add_argument("--depth", type=int, default=2, help="hidden Linear+ReLU layers per model")
    p.add_argument("--width", type=int, default=256, help="hidden width")
    p.add_argument("--batch", type=int, default=64, help="batch of each model")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--iters", type=int, default=200, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (median reported)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before timing")
    p.add_argument("--modes", default=",".join(MODES), help="comma list of " + ", ".join(MODES))
    p.add_argument("--precisions", default="highest,default",
                   help="comma list of matmul precisions: " + ", ".join(PRECISIONS))
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--tf32", action="store_true",
                   help="same as --precisions tensorfloat32")
    p.add_argument("--json", metavar="FILE", help="write results as JSON here")
    a = p.parse_args()
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.modes if m not in MODES]
    if bad or not a.modes:
        p.error(f"--modes: unknown {bad}; choose from {', '.join(MODES)}")
    a.precisions = ["tensorfloat32"] if a.tf32 else [
        x.strip() for x in a.precisions.split(",") if x.strip()]
    bad = [x for x in a.precisions if x not in PRECISIONS]
    if bad or not a.precisions:
        p.error(f"--precisions: unknown {bad}; choose from {', '.join(PRECISIONS)}")
    if a.rounds < 1:
        p.error("need --rounds >= 1")
    if a.iters < 2 or a.warmup < 0 or a.depth < 0 or min(a.models, a.input_features, a.width,
                                                          a.batch, a.classes) < 1:
        p.error("need --iters >= 2, --warmup >= 0, --depth >= 0 and positive sizes")
    return a


def init_params(key, a):
    """One model: list of {"w": (fan_in, fan_out), "b": (fan_out,)}, U(+-1/sqrt(fan_in))."""
    sizes = [a.input_features] + [a.width] * a.depth + [a.classes]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, kw, kb = jax.random.split(key, 3)
        bound = 1.0 / fan_in ** 0.5
        params.append({"w": jax.random.uniform(kw, (fan_in, fan_out), jnp.float32, -bound, bound),
                       "b": jax.random.uniform(kb, (fan_out,), jnp.float32, -bound, bound)})
    return params


def make_step(a, precision):
    tree_map = jax.tree_util.tree_map

    def loss_fn(params, x, y):
        h = x
        for layer in params[:-1]:
            h = jax.nn.relu(jnp.dot(h, layer["w"], precision=precision) + layer["b"])
        logits = jnp.dot(h, params[-1]["w"], precision=precision) + params[-1]["b"]
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))

    def step(params, mom, x, y):  # one model
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        if a.weight_decay:
            grads = tree_map(lambda g, p: g + a.weight_decay * p, grads, params)
        mom = tree_map(lambda m, g: a.momentum * m + g, mom, grads)
        params = tree_map(lambda p, m: p - a.lr * m, params, mom)
        return params, mom, loss

    return jax.vmap(step)


def block(tree):
    if hasattr(jax, "block_until_ready"):
        return jax.block_until_ready(tree)
    return jax.tree_util.tree_map(lambda t: t.block_until_ready(), tree)


def run_mode(a, dev, mode, precision):
    """Median ms per step over a.rounds rounds of a.iters steps, each round blocked on once."""
    key = jax.random.PRNGKey(0)
    key, pkey = jax.random.split(key)
    params = jax.vmap(lambda k: init_params(k, a))(jax.random.split(pkey, a.models))
    mom = jax.tree_util.tree_map(jnp.zeros_like, params)
    xs, ys = [], []
    for _ in range(NUM_BATCHES):
        key, kx, ky = jax.random.split(key, 3)
        xs.append(jax.random.normal(kx, (a.models, a.batch, a.input_features), jnp.float32))
        ys.append(jax.random.randint(ky, (a.models, a.batch), 0, a.classes, jnp.int32))
    block((params, mom, xs, ys))
    vstep = make_step(a, precision)

    if mode == "jit_vmap":
        step = jax.jit(vstep, donate_argnums=(0, 1))

        def run(params, mom, steps, first):  # queued asynchronously, not blocked on here
            loss = None
            for i in range(first, first + steps):
                params, mom, loss = step(params, mom, xs[i % NUM_BATCHES], ys[i % NUM_BATCHES])
            return params, mom, loss
    else:
        x_all, y_all = jnp.stack(xs), jnp.stack(ys)

        @jax.jit
        def scan_steps(params, mom, idx):
            def body(carry, i):
                p, m = carry
                p, m, loss = vstep(p, m, x_all[i % NUM_BATCHES], y_all[i % NUM_BATCHES])
                return (p, m), loss
            (params, mom), losses = jax.lax.scan(body, (params, mom), idx)
            return params, mom, losses[-1]

        def run(params, mom, steps, first):
            return scan_steps(params, mom, jnp.arange(first, first + steps, dtype=jnp.int32))

    t0 = time.perf_counter()
    params, mom, loss = block(run(params, mom, a.iters if mode == "scan" else 1, 0))  # compiles
    compile_s = time.perf_counter() - t0
    if a.warmup:
        params, mom, loss = block(run(params, mom, a.iters if mode == "scan" else a.warmup, 1))
    per_step = []
    for r in range(a.rounds):
        t0 = time.perf_counter()
        params, mom, loss = block(run(params, mom, a.iters, 1 + r * a.iters))
        per_step.append((time.perf_counter() - t0) * 1e3 / a.iters)
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    return {"median_ms": statistics.median(per_step), "min_ms": min(per_step),
            "max_ms": max(per_step), "rounds_ms": per_step,
            "peak_bytes": (stats or {}).get("peak_bytes_in_use"),
            "compile_s": compile_s, "final_loss_sum": float(jnp.sum(loss))}


def main():
    a = parse_args()
    config = {k: getattr(a, k) for k in ("models", "input_features", "depth", "width", "batch",
                                         "classes", "iters", "rounds", "warmup", "modes",
                                         "precisions", "lr", "momentum", "weight_decay")}
    config["dtype"] = "float32"
    if jax is None:
        why = f"jax is not installed ({_IMPORT_ERROR})"
        print(f"jax_ensemble: error: {why}", file=sys.stderr)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"error": why, "config": config}, f, indent=2)
        return 1

    dev = jax.devices()[0]
    if dev.platform != "gpu":
        print(f"jax_ensemble: warning: default device is {dev.platform}, not a GPU",
              file=sys.stderr)

    results = {}
    for precision in a.precisions:
        for mode in a.modes:
            try:
                r = run_mode(a, dev, mode, precision)
            except Exception as e:  # report and go on
                r = {"error": f"{type(e).__name__}: {e}"}
            results[f"{mode}/{precision}"] = r
            head = (f"jax {mode} precision={precision} models={a.models} "
                    f"input_features={a.input_features} depth={a.depth} width={a.width} "
                    f"batch={a.batch}")
            if "error" in r:
                print(f"{head} error={r['error']!r}", flush=True)
            else:
                print(f"{head} median_ms={r['median_ms']:.4f} min_ms={r['min_ms']:.4f} "
                      f"max_ms={r['max_ms']:.4f}", flush=True)

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
