#!/usr/bin/env python3
"""Repeats a train_gpt2 run in PyTorch, for issue 40's bar: "the training loss on the real corpus
falls to what the PyTorch script reaches with the same data and steps".

Reads what train_gpt2 recorded (examples/support/gpt2_run_log.h):
  --reprise-log  its loss log: the run's settings ('config' lines) are taken from it, so the two
                 runs cannot differ by a mistyped flag;
  --init         its initial weights (--save_initial: safetensors, PyTorch state dict names);
  --batch-log    its batches' tokens (--batch_log), optional: a check, not the source.
and trains torch_gpt2.py's model (the same nanoGPT-style GPT-2, its vocabulary unpadded as
reprise's loss sees it: reprise pads the logits with columns the loss leaves out, which is the
unpadded model's loss) from those weights on the same batches read from the same shards in the
same order, with the same step: bf16 autocast over float32 master weights (TF32 off, as in
reprise), mean cross-entropy, backward, clip_grad_norm_ at max_grad_norm, AdamW (betas, eps,
weight decay on the 2-D weights only, fused on a GPU) with the learning rate of reprise's
LrSchedule (warm-up then cosine, torch_gpt2.lr_factor) set before each step. The validation loss
is evaluated after the same steps (every eval_every and the last) on the same batches (the
validation shards' windows in file order, B per batch, the first eval_batches batches), as the
mean of the batches' mean losses. Writes the same loss log format (--out); gpt2_loss_compare.py
compares the two.

The batches: train_gpt2's TokenLoader cuts each training shard into windows of T + 1 tokens
starting every T tokens, numbers them shard after shard, and reads epoch e's windows in the order
of a seeded Fisher-Yates shuffle (SplitMix64 with unbiased bounded draws, src/data/
token_windows.cc), B consecutive positions per batch. epoch_order below is that shuffle written
again; each batch read from the shards is checked against the batch log, token for token, so a
difference in either is found at its first step and reported (exit 2).

Exit status: 0 trained, 2 cannot run (bad logs, weights that do not fit, a batch that differs).
  python3 tools/bench/torch_gpt2_train.py --reprise-log r.log --init init.safetensors \\
      --batch-log batches.bin --data-dir data/shakespeare --out torch.log
  python3 tools/bench/torch_gpt2_train.py --self-test   # the shuffle and the log reader, no GPU
"""
import argparse, glob, json, os, struct, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
TIED = "lm_head.weight"  # torch's output projection: the token embedding itself


class RunError(Exception):
    """A reason this run cannot be repeated, for the user."""


# ---------------------------------------------------------------------------------------------
# The batch order: src/data/token_windows.cc's EpochOrder, and TokenLoader's batches.

def splitmix64(state):
    """(next state, value): one SplitMix64 step, as src/util/splitmix64.h."""
    state = (state + GAMMA) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def bounded(state, bound):
    """(next state, uniform draw in [0, bound)): Lemire's multiply-shift with rejection."""
    state, r = splitmix64(state)
    product = r * bound
    low = product & MASK
    if low < bound:
        threshold = ((1 << 64) - bound) % bound
        while low < threshold:
            state, r = splitmix64(state)
            product = r * bound
            low = product & MASK
    return state, product >> 64


def epoch_order(n, seed, epoch):
    """The permutation of [0, n) that epoch `epoch` reads the windows in."""
    order = list(range(n))
    _, first = splitmix64(seed & MASK)
    state = first ^ ((epoch * 0xD1B54A32D192ED03) & MASK)
    for i in range(n - 1, 0, -1):
        state, j = bounded(state, i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def read_shard(path, vocab):
    """The tokens of an llm.c shard as a list-like of ints (array 'H'), checked as
    TokenShard::Open checks them."""
    import array
    with open(path, "rb") as f:
        header = f.read(1024)
        body = f.read()
    if len(header) < 1024:
        raise RunError(f"shard {path}: shorter than its 1024-byte header")
    magic, version, count = struct.unpack("<3i", header[:12])
    if magic != 20240520 or version != 1 or count < 0 or len(body) != 2 * count:
        raise RunError(f"shard {path}: not an llm.c token shard (magic {magic}, version "
                       f"{version}, count {count}, {len(body)} body bytes)")
    tokens = array.array("H")
    tokens.frombytes(body)
    if sys.byteorder != "little":
        tokens.byteswap()
    if count and max(tokens) >= vocab:
        raise RunError(f"shard {path}: token {max(tokens)} is outside the vocabulary {vocab}")
    return tokens


class Windows:
    """Windows of T + 1 tokens starting every T tokens, numbered shard after shard."""

    def __init__(self, paths, seq, vocab):
        self.seq, self.shards, self.first = seq, [read_shard(p, vocab) for p in paths], [0]
        for tokens in self.shards:
            if len(tokens) < seq + 1:
                raise RunError(f"a shard has {len(tokens)} tokens, fewer than {seq} + 1")
            self.first.append(self.first[-1] + (len(tokens) - 1) // seq)

    @property
    def count(self):
        return self.first[-1]

    def window(self, w):
        import bisect
        s = bisect.bisect_right(self.first, w) - 1
        start = (w - self.first[s]) * self.seq
        return self.shards[s][start:start + self.seq + 1]


def train_batch(windows, k, batch, seed, cache):
    """Batch k of the shuffled loader: B windows (lists of T + 1 tokens)."""
    rows, n = [], windows.count
    for b in range(batch):
        position = k * batch + b
        epoch = position // n
        if cache.get("epoch") != epoch:
            cache["epoch"], cache["order"] = epoch, epoch_order(n, seed, epoch)
        rows.append(windows.window(cache["order"][position % n]))
    return rows


def val_batch(windows, i, batch):
    """Validation batch i: windows i*B .. i*B + B - 1 in file order."""
    return [windows.window(i * batch + b) for b in range(batch)]


class BatchLog:
    """train_gpt2's --batch_log: per step B rows of T + 1 little-endian uint16."""

    def __init__(self, path, batch, seq, steps):
        self.path, self.row = path, seq + 1
        self.step_bytes = 2 * batch * (seq + 1)
        size = os.path.getsize(path)
        if size != steps * self.step_bytes:
            raise RunError(f"batch log {path}: {size} bytes; {steps} steps of {batch} x "
                           f"({seq} + 1) uint16 are {steps * self.step_bytes}")
        self.f = open(path, "rb")

    def rows(self, step):
        import array
        self.f.seek((step - 1) * self.step_bytes)
        a = array.array("H")
        a.frombytes(self.f.read(self.step_bytes))
        if sys.byteorder != "little":
            a.byteswap()
        return [a[i:i + self.row] for i in range(0, len(a), self.row)]


# ---------------------------------------------------------------------------------------------
# The logs and the weights.

def read_loss_log(path):
    """(config {key: str}, train {step: loss}, val {step: loss}) of a loss log."""
    config, train, val = {}, {}, {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                if parts[0] == "config":
                    config[parts[1]] = " ".join(parts[2:])
                elif parts[0] in ("train", "val") and len(parts) == 3:
                    (train if parts[0] == "train" else val)[int(parts[1])] = float(parts[2])
                else:
                    raise ValueError("unknown record")
            except (ValueError, IndexError) as e:
                raise RunError(f"{path}:{number}: cannot read '{line.strip()}' ({e})") from None
    return config, train, val


def read_safetensors(path):
    """{name: torch tensor} from a safetensors file (F32, F64, I32, I64, BF16), read here so
    that the safetensors package is not needed."""
    import torch
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32,
              "I64": torch.int64, "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise RunError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise RunError(f"{path}: unreadable safetensors header ({e})") from None
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in dtypes:
            raise RunError(f"{path}: tensor {name} has dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=dtypes[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


def write_loss_log(path, config, train, val):
    with open(path, "w") as f:
        for key, value in config.items():
            f.write(f"config {key} {value}\n")
        for step in sorted(set(train) | set(val)):
            if step in train:
                f.write(f"train {step} {train[step]:.9g}\n")
            if step in val:
                f.write(f"val {step} {val[step]:.9g}\n")


# ---------------------------------------------------------------------------------------------
# The run.

def settings(config):
    """The reprise run's settings, typed; RunError for a setting this script does not repeat."""
    need = ["layers", "heads", "width", "vocab", "max_positions", "batch", "seq", "steps",
            "dtype", "lr", "beta1", "beta2", "eps", "weight_decay", "decay_rank1",
            "max_grad_norm", "warmup", "decay", "total_steps", "min_lr_factor", "seed",
            "eval_every", "eval_batches", "train_shards", "val_shards", "optimizer"]
    missing = [k for k in need if k not in config]
    if missing:
        raise RunError(f"the reprise log has no config {', '.join(missing)} (was it written by "
                       "train_gpt2 --loss_log?)")
    ints = ("layers", "heads", "width", "vocab", "max_positions", "batch", "seq", "steps",
            "warmup", "total_steps", "seed", "eval_every", "eval_batches", "decay_rank1")
    floats = ("lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm", "min_lr_factor")
    s = {k: int(config[k]) for k in ints}
    s.update({k: float(config[k]) for k in floats})
    s.update({k: config[k] for k in ("dtype", "decay", "optimizer")})
    s["train_shards"] = config["train_shards"].split(",")
    s["val_shards"] = config["val_shards"].split(",")
    if s["optimizer"] != "adamw" or s["decay"] != "cosine" or s["decay_rank1"]:
        raise RunError(f"optimizer {s['optimizer']}, decay {s['decay']}, decay_rank1 "
                       f"{s['decay_rank1']}: only AdamW with a cosine decay of the 2-D weights is "
                       "repeated here")
    if s["dtype"] not in ("bf16", "f32"):
        raise RunError(f"dtype {s['dtype']}: bf16 or f32 only")
    return s


def shard_paths(data_dir, logged, part):
    """The shards in data_dir, as train_gpt2 lists them; their names must be the logged ones."""
    found = sorted(glob.glob(os.path.join(data_dir, f"*{part}*.bin")))
    if [os.path.basename(p) for p in found] != [os.path.basename(p) for p in logged]:
        raise RunError(f"{data_dir} holds {[os.path.basename(p) for p in found]}; the reprise run "
                       f"read {[os.path.basename(p) for p in logged]}")
    return found


def make_model(s, init, device):
    import torch
    import torch_gpt2
    model = torch_gpt2.build_gpt2(s["layers"], s["heads"], s["width"], s["vocab"],
                                  s["max_positions"])
    state = model.state_dict()
    expected = set(state) - {TIED}
    got = set(init)
    if got != expected:
        raise RunError(f"initial weights: missing {sorted(expected - got)}, unexpected "
                       f"{sorted(got - expected)}")
    with torch.no_grad():
        for name in sorted(expected):
            value = init[name]
            if tuple(value.shape) != tuple(state[name].shape):
                raise RunError(f"initial weight {name}: shape {list(value.shape)} in the file, "
                               f"{list(state[name].shape)} in the torch model")
            state[name].copy_(value.to(torch.float32))
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        raise RunError("the torch model's lm_head is not tied to transformer.wte")
    return model.to(device)


def f32(x):
    """x rounded to float32 (the logs print reprise's float settings exactly, as %.9g)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def to_tensors(rows, device):
    import torch
    w = torch.tensor([list(r) for r in rows], dtype=torch.int64)
    return w[:, :-1].contiguous().to(device), w[:, 1:].contiguous().to(device)


def run(a):
    import torch
    import torch_gpt2
    config, _, _ = read_loss_log(a.reprise_log)
    s = settings(config)
    if [f32(s[k]) for k in ("beta1", "beta2", "eps")] != [f32(0.9), f32(0.95), f32(1e-8)]:
        raise RunError(f"betas {s['beta1']}/{s['beta2']}, eps {s['eps']}: torch_gpt2.make_adamw "
                       "uses 0.9/0.95 and 1e-8")
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False  # reprise's allow_tf32 is off in train_gpt2
    torch.backends.cudnn.allow_tf32 = False
    B, T, steps = s["batch"], s["seq"], s["steps"]
    train_w = Windows(shard_paths(a.data_dir, s["train_shards"], "_train_"), T, s["vocab"])
    val_w = Windows(shard_paths(a.data_dir, s["val_shards"], "_val_"), T, s["vocab"])
    eval_batches = min(s["eval_batches"], val_w.count // B)
    if eval_batches != s["eval_batches"]:
        raise RunError(f"the validation shards hold {val_w.count // B} batches; the reprise run "
                       f"evaluated {s['eval_batches']}")
    log = BatchLog(a.batch_log, B, T, steps) if a.batch_log else None
    model = make_model(s, read_safetensors(a.init), device)
    params = list(model.parameters())
    opt = torch_gpt2.make_adamw(model, s["lr"], s["weight_decay"], fused=device == "cuda")
    precision = "bf16" if s["dtype"] == "bf16" else "fp32"
    val_data = [to_tensors(val_batch(val_w, i, B), device) for i in range(eval_batches)]

    def evaluate():
        model.eval()
        with torch.no_grad():
            total = 0.0
            for x, y in val_data:
                with torch_gpt2.autocast(precision, device):
                    total += float(model(x, y).float())
        model.train()
        return total / len(val_data)

    train, val, cache, t0 = {}, {}, {}, time.time()
    for step in range(1, steps + 1):
        rows = train_batch(train_w, step - 1, B, s["seed"], cache)
        if log is not None:
            logged = log.rows(step)
            for b, (ours, theirs) in enumerate(zip(rows, logged)):
                if list(ours) != list(theirs):
                    where = next(i for i, (u, v) in enumerate(zip(ours, theirs)) if u != v)
                    raise RunError(f"step {step}, sequence {b}: the shards' window differs from "
                                   f"the batch log at token {where} ({ours[where]} here, "
                                   f"{theirs[where]} logged)")
        x, y = to_tensors(rows, device)
        factor = torch_gpt2.lr_factor(step - 1, s["warmup"], s["total_steps"], s["min_lr_factor"])
        for g in opt.param_groups:
            g["lr"] = s["lr"] * factor
        opt.zero_grad(set_to_none=True)
        with torch_gpt2.autocast(precision, device):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, s["max_grad_norm"])
        opt.step()
        train[step] = float(loss.detach().float())
        if (s["eval_every"] > 0 and step % s["eval_every"] == 0) or step == steps:
            val[step] = evaluate()
            print(f"torch_gpt2_train: step {step}/{steps} loss {train[step]:.4f} validation "
                  f"{val[step]:.4f} ({time.time() - t0:.1f} s)", flush=True)
    out_config = dict(config)
    out_config["framework"] = f"torch {torch.__version__} on {device}"
    out_config["batches_checked"] = "1" if log is not None else "0"
    write_loss_log(a.out, out_config, train, val)
    return 0


# ---------------------------------------------------------------------------------------------
# Self-test: no GPU, no reprise.

# EpochOrder's values as src/data/token_windows.cc computes them (tests/cpu/token_loader_test.cc,
# EpochOrderPinnedValues, pins the same on the C++ side).
PINNED_ORDERS = {(10, 1337, 0): [8, 9, 6, 0, 7, 4, 2, 5, 3, 1],
                 (10, 1337, 1): [3, 9, 4, 5, 6, 0, 7, 1, 2, 8],
                 (7, 0, 3): [4, 0, 2, 5, 3, 6, 1]}


def self_test():
    import tempfile
    problems = []
    for (n, seed, epoch), want in PINNED_ORDERS.items():
        got = epoch_order(n, seed, epoch)
        if sorted(got) != list(range(n)):
            problems.append(f"epoch_order({n}, {seed}, {epoch}) = {got} is no permutation")
        if got != want:
            problems.append(f"epoch_order({n}, {seed}, {epoch}) = {got}, C++ gives {want}")
    with tempfile.TemporaryDirectory() as d:
        tokens = list(range(1, 41))
        path = os.path.join(d, "t_train_000000.bin")
        with open(path, "wb") as f:
            f.write(struct.pack("<3i", 20240520, 1, len(tokens)) + bytes(1012))
            f.write(struct.pack(f"<{len(tokens)}H", *tokens))
        w = Windows([path], 8, 64)
        if w.count != 4 or list(w.window(1)) != list(range(9, 18)):
            problems.append(f"windows: {w.count} windows, window 1 = {list(w.window(1))}")
        rows = train_batch(w, 0, 2, 1337, {})
        with open(os.path.join(d, "b.bin"), "wb") as f:
            for r in rows + train_batch(w, 1, 2, 1337, {}):
                f.write(struct.pack(f"<{len(r)}H", *r))
        log = BatchLog(os.path.join(d, "b.bin"), 2, 8, 2)
        if [list(r) for r in log.rows(1)] != [list(r) for r in rows]:
            problems.append("batch log: rows read back differ")
    for p in problems:
        print(f"torch_gpt2_train: self-test: {p}", file=sys.stderr)
    print(f"torch_gpt2_train: self-test {'FAIL' if problems else 'PASS'}")
    return 1 if problems else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reprise-log", help="train_gpt2's --loss_log (its settings are used)")
    p.add_argument("--init", help="train_gpt2's --save_initial file")
    p.add_argument("--batch-log", help="train_gpt2's --batch_log (each batch is checked)")
    p.add_argument("--data-dir", help="the shards train_gpt2 read")
    p.add_argument("--out", help="where this run's loss log goes")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if available")
    p.add_argument("--self-test", action="store_true", help=self_test.__doc__)
    a = p.parse_args(argv)
    if a.self_test:
        return self_test()
    missing = [f"--{k.replace('_', '-')}" for k in ("reprise_log", "init", "data_dir", "out")
               if not getattr(a, k)]
    if missing:
        p.error(f"needs {', '.join(missing)}")
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"torch_gpt2_train: cannot run: {e}", file=sys.stderr)
        return 2
    try:
        return run(a)
    except (RunError, OSError) as e:
        print(f"torch_gpt2_train: cannot run: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
