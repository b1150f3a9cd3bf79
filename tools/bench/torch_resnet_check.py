#!/usr/bin/env python3
"""Checks one reprise ResNet training step against PyTorch's, tensor by tensor.

reprise writes into DIR:
  initial.safetensors  every parameter by torchvision name (conv1.weight, bn1.weight, bn1.bias,
                       layer1.0.downsample.0.weight, fc.weight [classes, features], fc.bias, ...),
                       each batch norm's <bn>.running_mean and <bn>.running_var, each parameter's
                       SGD momentum buffer <param>.momentum, and perhaps an I32 rng.step (ignored)
  batch.safetensors    images F32 ([N,3,S,S] NCHW or [N,S,S,3] NHWC) and labels I32 [N]; its
                       __metadata__ holds depth, classes, image_size, layout (NCHW/NHWC), lr,
                       momentum, weight_decay, bn_momentum, bn_epsilon (strings)
  after.safetensors    the same names as initial.safetensors after one SGD step
  loss.txt             the loss of that step, as text
With layout NHWC, 4-D tensors (convolution weights and their momentum) are [K, R, S, C/groups] and
the images [N, S, S, 3]; both are permuted to PyTorch's order here.

This script loads the initial state into torchvision's resnet<depth> (the in-script copy of
tools/bench/torch_resnet.py when torchvision does not import; --model picks), in train mode, with
TF32 off and deterministic cuDNN, batch norms given bn_momentum and bn_epsilon; runs forward,
CrossEntropyLoss (mean) and backward; then torch.optim.SGD(lr, momentum, weight_decay), its
momentum buffers preloaded from the initial <param>.momentum, takes one step. Relative L2 errors
||a - b|| / ||b|| (the absolute error where ||b|| is 0; inf where either holds a NaN or Inf), by
class:
  loss      the loss
  momentum  <param>.momentum after the step against torch's momentum buffer after its step, which
            on a first step from zero buffers with weight_decay 0 is exactly the parameter's .grad
  running   every <bn>.running_mean and <bn>.running_var after the step
  weights   every parameter after the step
  update    (after - initial) of each parameter: printed for information only, not gated, as the
            rounding of w - lr*v can dominate a small step
References (--reference):
  torch  (default) a = torch's fp32 step, b = reprise's; each error at most --tol.
  f64    a = reprise's, b = torch's float64 step; each error at most max(tol, slack x the largest
         error that torch's own fp32 step (run too) makes in that class). Coarse but robust.
F64 files (reprise's float64 models) are compared with torch's float64 step, against --tol.
Why f64: fp32 steps of a ReLU network made by two correct implementations differ by ~1e-3..5e-2
in most gradients (ResNet-18 at 16x224, ResNet-50 at any size), because the few ReLUs whose
input rounds to the other sign each move a whole gradient element and batch norm spreads that
over its channel. Small basic-block runs (ResNet-18/34, 32-64 px, batch 4-8) have next to no
such flips and agreed to 1e-4..5e-4 in tests, so --tol 1e-3 against torch fp32 is sharp there.
Output: a header line, one line per class, the 5 worst gated tensors, then
  torch_resnet_check: PASS max_rel_err=1.2e-06 (N tensors)
  torch_resnet_check: FAIL max_rel_err=3.4e-02 (M of N tensors over tol=0.001)
  torch_resnet_check: ERROR cannot run           (the reason on stderr)
Exit status: 0 pass; 1 some error over its bound (or a NaN); 2 cannot run (no torch or no
GPU, a missing or malformed file, names or shapes that do not match: the message says which).

  python3 tools/bench/torch_resnet_check.py /tmp/resnet_step --json check.json
  python3 tools/bench/torch_resnet_check.py /tmp/resnet_step --reference f64
  python3 tools/bench/torch_resnet_check.py /tmp/resnet_step --device cpu
"""
import argparse, json, math, os, re, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ("initial.safetensors", "batch.safetensors", "after.safetensors", "loss.txt")
IGNORED = ("rng.step",)  # names in the state files that have no PyTorch counterpart
MAX_HEADER_BYTES = 100_000_000  # as the reference implementation (and reprise's reader)
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1}
CLASSES = ("loss", "momentum", "running", "weights")  # gated
WORST = 5
# Defaults for metadata entries that may be missing: reprise's (and PyTorch's) defaults.
META_DEFAULTS = {"lr": "0.01", "momentum": "0.9", "weight_decay": "0", "bn_momentum": "0.1",
                 "bn_epsilon": "1e-5"}
META_REQUIRED = ("depth", "classes", "image_size", "layout")


class CannotRun(Exception):
    """Something that stops the check before it can compare (exit status 2)."""


class Tensor:
    """One tensor of a safetensors file: dtype name, shape and its raw little-endian bytes."""
    __slots__ = ("dtype", "shape", "data")

    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, tuple(shape), data

    def numel(self):
        return math.prod(self.shape)

    def values(self):
        """Python numbers, flat, row-major (F32, F64, I32, I64 only: for tests and scalars)."""
        fmt = {"F32": "f", "F64": "d", "I32": "i", "I64": "q"}.get(self.dtype)
        if fmt is None:
            raise ValueError(f"values(): {self.dtype} is not decoded here")
        return list(struct.unpack(f"<{self.numel()}{fmt}", self.data))

    def spec(self):
        return f"{self.dtype}{list(self.shape)}"


def read_safetensors(path):
    """({name: Tensor}, {metadata key: string}) from a safetensors file, checked: 8-byte
    little-endian header length, a JSON header {name: {dtype, shape, data_offsets}} (offsets
    relative to the data after the header) with an optional __metadata__ of strings, each
    tensor's bytes inside the data and exactly product(shape) x element size long. Raises
    CannotRun naming the file and what is wrong."""
    def bad(why):
        return CannotRun(f"{path}: {why}")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise bad(f"cannot read: {e.strerror or e}") from e
    if len(raw) < 8:
        raise bad(f"only {len(raw)} bytes: no header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER_BYTES or 8 + n > len(raw):
        raise bad(f"header length {n} runs past the file's {len(raw)} bytes")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise bad("header is not a JSON object")
    data = memoryview(raw)[8 + n:]
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad("__metadata__ is not an object of strings")
    tensors = {}
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (TypeError, KeyError, ValueError) as e:
            raise bad(f"tensor {name!r}: needs dtype, shape and two data_offsets") from e
        if dtype not in DTYPE_SIZES:
            raise bad(f"tensor {name!r}: unknown dtype {dtype!r}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
                or not all(isinstance(o, int) for o in (begin, end))):
            raise bad(f"tensor {name!r}: shape and data_offsets must be non-negative integers")
        if not 0 <= begin <= end <= len(data):
            raise bad(f"tensor {name!r}: data_offsets [{begin}, {end}] outside the "
                      f"{len(data)} bytes of data")
        if end - begin != math.prod(shape) * DTYPE_SIZES[dtype]:
            raise bad(f"tensor {name!r}: {dtype}{shape} needs "
                      f"{math.prod(shape) * DTYPE_SIZES[dtype]} bytes, data_offsets give {end - begin}")
        tensors[name] = Tensor(dtype, shape, data[begin:end])
    return tensors, metadata


def read_loss(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise CannotRun(f"{path}: cannot read: {e.strerror or e}") from e
    m = re.search(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", text, re.I)
    if m is None:
        raise CannotRun(f"{path}: no number in {text.strip()[:80]!r}")
    return float(m.group(0))


def read_config(batch_meta):
    """The run's settings from batch.safetensors' metadata, parsed."""
    missing = [k for k in META_REQUIRED if k not in batch_meta]
    if missing:
        raise CannotRun(f"batch.safetensors: __metadata__ lacks {', '.join(missing)} "
                        f"(it has {', '.join(sorted(batch_meta)) or 'nothing'})")
    meta = {**META_DEFAULTS, **batch_meta}
    try:
        c = {"depth": int(meta["depth"]), "classes": int(meta["classes"]),
             "image_size": int(meta["image_size"]), "layout": meta["layout"].upper(),
             **{k: float(meta[k]) for k in META_DEFAULTS}}
    except ValueError as e:
        raise CannotRun(f"batch.safetensors: __metadata__: {e}") from e
    if c["layout"] not in ("NCHW", "NHWC"):
        raise CannotRun(f"batch.safetensors: layout {meta['layout']!r} is neither NCHW nor NHWC")
    if c["depth"] not in (18, 34, 50, 101, 152):
        raise CannotRun(f"batch.safetensors: depth {c['depth']} is not 18, 34, 50, 101 or 152")
    c["defaulted"] = sorted(k for k in META_DEFAULTS if k not in batch_meta)
    return c


def load_inputs(d):
    """Everything read from DIR, before torch is needed: CannotRun for whatever is missing."""
    missing = [f for f in FILES if not os.path.isfile(os.path.join(d, f))]
    if missing:
        raise CannotRun(f"{d}: missing {', '.join(missing)}")
    initial, _ = read_safetensors(os.path.join(d, "initial.safetensors"))
    batch, batch_meta = read_safetensors(os.path.join(d, "batch.safetensors"))
    after, _ = read_safetensors(os.path.join(d, "after.safetensors"))
    loss = read_loss(os.path.join(d, "loss.txt"))
    config = read_config(batch_meta)
    for name in ("images", "labels"):
        if name not in batch:
            raise CannotRun(f"batch.safetensors: no {name!r} (it has {', '.join(sorted(batch))})")
    if batch["images"].dtype not in ("F32", "F64") or batch["labels"].dtype not in ("I32", "I64"):
        raise CannotRun(f"batch.safetensors: images {batch['images'].spec()} and labels "
                        f"{batch['labels'].spec()}: expected F32 (or F64) images, I32 labels")
    s = config["image_size"]
    n = batch["labels"].shape[0] if len(batch["labels"].shape) == 1 else -1
    want = (n, 3, s, s) if config["layout"] == "NCHW" else (n, s, s, 3)
    if n < 1 or batch["images"].shape != want:
        raise CannotRun(f"batch.safetensors: images {batch['images'].spec()} and labels "
                        f"{batch['labels'].spec()} do not fit layout {config['layout']}, "
                        f"image_size {s}")
    config["batch"] = n
    config["dtype"] = batch["images"].dtype  # F32, or F64 for a float64 reprise model
    for name, t in list(initial.items()) + list(after.items()):
        if name not in IGNORED and t.dtype != config["dtype"]:
            raise CannotRun(f"{name} is {t.spec()}: expected {config['dtype']} like the images")
    return initial, batch, after, loss, config


def rel_err(got, ref):
    """||got - ref|| / ||ref|| in float64 on the CPU (absolute where ref is all zeros; inf for a
    NaN or Inf on either side or a shape mismatch). Tensors or Python numbers."""
    import torch
    got, ref = (torch.as_tensor(t).detach().double().cpu() for t in (got, ref))
    if got.shape != ref.shape or not (torch.isfinite(got).all() and torch.isfinite(ref).all()):
        return math.inf
    diff, norm = torch.linalg.vector_norm(got - ref).item(), torch.linalg.vector_norm(ref).item()
    return diff / norm if norm > 0 else diff


def to_torch(t, layout_nhwc):
    """A Tensor as a CPU torch tensor (a copy), 4-D NHWC-ordered ones permuted to PyTorch's."""
    import torch
    if sys.byteorder != "little":
        raise CannotRun("safetensors data is little-endian; this host is not")
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64,
              "BF16": torch.bfloat16, "F16": torch.float16}
    if t.numel() == 0:
        x = torch.empty(t.shape, dtype=dtypes[t.dtype])
    else:
        x = torch.frombuffer(bytearray(t.data), dtype=dtypes[t.dtype]).reshape(t.shape)
    if layout_nhwc and x.dim() == 4:
        x = x.permute(0, 3, 1, 2).contiguous()
    return x


def expected_names(model):
    """The names reprise's state files must hold for `model`, with the shape PyTorch gives each:
    parameters, their .momentum, and the batch norms' running statistics."""
    params = [k for k, _ in model.named_parameters()]
    buffers = [k for k, _ in model.named_buffers() if not k.endswith("num_batches_tracked")]
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items() if k in params + buffers}
    shapes.update({f"{k}.momentum": shapes[k] for k in params})
    return params, buffers, shapes


def check_names(what, have, shapes, layout_nhwc):
    """CannotRun listing the names missing from, or extra in, a state file, or a shape that
    differs from PyTorch's (after the NHWC permutation)."""
    names = set(have) - set(IGNORED)
    missing, extra = sorted(set(shapes) - names), sorted(names - set(shapes))

    def listed(xs):
        return ", ".join(xs[:12]) + (f" and {len(xs) - 12} more" if len(xs) > 12 else "")
    if missing or extra:
        parts = ([f"missing {len(missing)}: {listed(missing)}"] if missing else []) + \
                ([f"unexpected {len(extra)}: {listed(extra)}"] if extra else [])
        raise CannotRun(f"{what}: names do not match the torch model's; " + "; ".join(parts))
    for name in sorted(shapes):
        shape = have[name].shape
        if layout_nhwc and len(shape) == 4:
            shape = (shape[0], shape[3], shape[1], shape[2])
        if tuple(shape) != shapes[name]:
            raise CannotRun(f"{what}: {name} is {have[name].spec()}"
                            f"{' (NHWC)' if layout_nhwc and len(shape) == 4 else ''}, "
                            f"the torch model's is {list(shapes[name])}")


def torch_step(build, init, images, labels, c, device, dtype, channels_last):
    """One training step of the torch model from reprise's initial state `init` (CPU tensors by
    reprise name, PyTorch's order): model.train(), forward, cross_entropy (mean), backward, then
    torch.optim.SGD with its momentum buffers preloaded from <param>.momentum. Returns
    {"loss": float, "momentum": {<param>.momentum: v}, "running": {<bn>.running_*: ...},
    "weights": {<param>: w after}}, tensors as float64 on the CPU."""
    import torch
    import torch.nn.functional as F
    model = build().to(dtype)
    params = [k for k, _ in model.named_parameters()]
    with torch.no_grad():
        for k, t in list(model.named_parameters()) + list(model.named_buffers()):
            if k in init:
                t.copy_(init[k])
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum, m.eps = c["bn_momentum"], c["bn_epsilon"]
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(device, memory_format=fmt).train()
    x = images.to(device=device, dtype=dtype).contiguous(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=c["lr"], momentum=c["momentum"],
                          weight_decay=c["weight_decay"])
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), labels.to(device))
    loss.backward()
    named = dict(model.named_parameters())
    if c["momentum"] != 0:
        for k, p in named.items():  # torch would start a missing buffer at the gradient itself
            opt.state[p]["momentum_buffer"] = init[f"{k}.momentum"].to(device, dtype, copy=True)
        opt.step()
        velocity = {k: opt.state[p]["momentum_buffer"] for k, p in named.items()}
    else:  # reprise keeps v = g + weight_decay * w, with no history
        velocity = {k: p.grad + c["weight_decay"] * p.detach() for k, p in named.items()}
        opt.step()

    def host(t):
        return t.detach().to("cpu", torch.float64)
    out = {"loss": loss.item(),
           "momentum": {f"{k}.momentum": host(v) for k, v in velocity.items()},
           "running": {k: host(b) for k, b in model.named_buffers() if k in init},
           "weights": {k: host(named[k]) for k in params}}
    del model, opt, loss, velocity, named
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return out


def compare(got, ref, init):
    """{class: {name: rel_err(got, ref)}} over the result sets of torch_step's shape, with the
    "update" class (after - initial) of every parameter."""
    errs = {"loss": {"loss": rel_err(got["loss"], ref["loss"])}}
    for cls in ("momentum", "running", "weights"):
        errs[cls] = {k: rel_err(got[cls][k], ref[cls][k]) for k in ref[cls]}
    errs["update"] = {k: rel_err(w - init[k].double(), ref["weights"][k] - init[k].double())
                      for k, w in got["weights"].items()}
    return errs


def run_check(a):
    """Returns (errors, bounds, torch_fp32_errors or None, reference in words)."""
    initial, batch, after, reprise_loss, c = load_inputs(a.dir)
    try:
        import torch
    except ImportError as e:
        raise CannotRun(f"torch is not installed ({e})") from e
    if a.device == "cuda" and not torch.cuda.is_available():
        raise CannotRun("no CUDA GPU visible (--device cpu runs on the CPU)")
    sys.path.insert(0, HERE)
    import torch_resnet
    try:
        source = torch_resnet.model_source(a.model)
    except ImportError as e:
        raise CannotRun(f"--model torchvision: {e}") from e
    nhwc = c["layout"] == "NHWC"
    f64_files = c["dtype"] == "F64"
    if f64_files:
        reference = "torch-f64"  # reprise's float64 model: both sides in float64
    else:
        reference = "torch-f64" if a.reference == "f64" else "torch-fp32"
    print(f"torch_resnet_check: depth={c['depth']} classes={c['classes']} "
          f"image_size={c['image_size']} batch={c['batch']} layout={c['layout']} "
          f"dtype={c['dtype']} lr={c['lr']:g} momentum={c['momentum']:g} "
          f"weight_decay={c['weight_decay']:g} bn_momentum={c['bn_momentum']:g} "
          f"bn_epsilon={c['bn_epsilon']:g} device={a.device} torch={torch.__version__} "
          f"model={source.replace(' ', '-')} reference={reference}"
          f"{' channels_last' if a.channels_last else ''}", flush=True)
    if c["defaulted"]:
        print(f"torch_resnet_check: note: metadata lacks {', '.join(c['defaulted'])}; "
              f"using {', '.join(f'{k}={META_DEFAULTS[k]}' for k in c['defaulted'])}", flush=True)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True

    def build():
        torch.manual_seed(0)
        return torch_resnet.build_resnet(c["depth"], c["classes"], a.model)
    _, _, shapes = expected_names(build())
    check_names("initial.safetensors", initial, shapes, nhwc)
    check_names("after.safetensors", after, shapes, nhwc)

    init = {k: to_torch(initial[k], nhwc) for k in shapes}
    images = to_torch(batch["images"], False)
    if nhwc:
        images = images.permute(0, 3, 1, 2)
    labels = to_torch(batch["labels"], False).long()
    if labels.min().item() < 0 or labels.max().item() >= c["classes"]:
        raise CannotRun(f"labels outside [0, {c['classes']}): min {labels.min().item()} "
                        f"max {labels.max().item()}")
    del initial, batch

    def step(dtype):
        print(f"torch_resnet_check: running torch's step in {str(dtype).replace('torch.', '')} "
              f"on {a.device}", file=sys.stderr, flush=True)
        return torch_step(build, init, images, labels, c, a.device, dtype, a.channels_last)
    theirs = {"loss": reprise_loss,
              "momentum": {f"{k}.momentum": to_torch(after[f"{k}.momentum"], nhwc).double()
                           for k in init if f"{k}.momentum" in init},
              "running": {k: to_torch(after[k], nhwc).double()
                          for k in init if ".running_" in k},
              "weights": {k: to_torch(after[k], nhwc).double()
                          for k in init if f"{k}.momentum" in init}}
    del after
    if reference == "torch-fp32" or f64_files:
        mine = step(torch.float64 if f64_files else torch.float32)
        print(f"torch_resnet_check: loss reprise={reprise_loss:.10g} torch={mine['loss']:.10g}",
              flush=True)
        # ||torch - reprise|| / ||reprise||
        errs = compare(mine, theirs, init)
        bounds = {cls: {k: a.tol for k in e} for cls, e in errs.items()}
        return errs, bounds, None, reference
    exact = step(torch.float64)
    fp32 = step(torch.float32)
    print(f"torch_resnet_check: loss reprise={reprise_loss:.10g} torch_fp32={fp32['loss']:.10g} "
          f"torch_f64={exact['loss']:.10g}", flush=True)
    # ||reprise - f64|| / ||f64||, bounded by how far torch's own fp32 step is from it: by the
    # worst of its class, since which tensors a flipped ReLU disturbs most is a matter of chance.
    errs, base = compare(theirs, exact, init), compare(fp32, exact, init)
    bounds = {cls: {k: max(a.tol, a.slack * max(base[cls].values())) for k in e}
              for cls, e in errs.items()}
    return errs, bounds, base, reference


def summarize(errs, bounds, base, tol):
    """Prints the class lines, the worst tensors and the verdict; returns (passed, verdict)."""
    for cls in CLASSES + ("update",):
        e = errs[cls]
        worst = max(e, key=lambda k: e[k])
        vals = sorted(e.values())
        over = sum(not e[k] <= bounds[cls][k] for k in e)
        extra = f"  torch_fp32_max={max(base[cls].values()):.3e}" if base else ""
        note = "  (information, not gated)" if cls not in CLASSES else f"  over={over}"
        print(f"{cls:<9} {len(e):4d} tensors  max_rel_err={e[worst]:.3e}  "
              f"median_rel_err={vals[len(vals) // 2]:.3e}  worst={worst}{extra}{note}")
    # Worst first, by error over its bound (rel_err gives inf, never NaN, for non-finite values).
    gated = sorted(((errs[cls][k], bounds[cls][k], cls, k) for cls in CLASSES for k in errs[cls]),
                   key=lambda t: -(t[0] / t[1] if t[1] > 0 else (math.inf if t[0] > 0 else 0)))
    print(f"worst {min(WORST, len(gated))}:")
    for v, bound, cls, k in gated[:WORST]:
        print(f"  {cls:<9} {k:<44} rel_err={v:.3e}" + (f"  bound={bound:.3e}" if base else ""))
    n, max_err = len(gated), max((t[0] for t in gated), default=0.0)
    bad = sum(not (v <= bound) for v, bound, _, _ in gated)
    if bad:
        limit = "their bounds" if base else f"tol={tol:g}"
        return False, (f"torch_resnet_check: FAIL max_rel_err={max_err:.3e} "
                       f"({bad} of {n} tensors over {limit})")
    return True, f"torch_resnet_check: PASS max_rel_err={max_err:.3e} ({n} tensors)"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Compare one reprise ResNet training step (safetensors in DIR) with PyTorch's")
    p.add_argument("dir", metavar="DIR",
                   help="holds initial.safetensors, batch.safetensors, after.safetensors, loss.txt")
    p.add_argument("--tol", type=float, default=1e-3, help="largest relative error that passes")
    p.add_argument("--reference", default="torch", choices=("torch", "f64"),
                   help="torch: compare with torch's fp32 step; f64: compare with torch's float64 "
                   "step, each tensor within max(tol, slack x the largest error of torch's own "
                   "fp32 step in its class)")
    p.add_argument("--slack", type=float, default=4.0,
                   help="with --reference f64: how many times torch fp32's error reprise may make")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--channels-last", action="store_true",
                   help="run the torch model and images in torch.channels_last")
    p.add_argument("--model", default="auto", choices=("auto", "torchvision", "builtin"),
                   help="auto: torchvision when it imports, else tools/bench/torch_resnet.py's copy")
    p.add_argument("--json", metavar="FILE", help="write every tensor's relative error here")
    a = p.parse_args(argv)
    if not a.tol >= 0 or not a.slack >= 0:
        p.error("--tol and --slack must be >= 0")
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        errs, bounds, base, reference = run_check(a)
    except CannotRun as e:
        print(f"torch_resnet_check: cannot run: {e}", file=sys.stderr)
        print("torch_resnet_check: ERROR cannot run", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"error": str(e)}, f, indent=2)
        return 2
    passed, verdict = summarize(errs, bounds, base, a.tol)
    if not passed and reference == "torch-fp32":
        print("torch_resnet_check: note: two correct fp32 steps of a ReLU network can differ by "
              "1e-3..1e-2 (a ReLU that flips sign moves a whole gradient element, and batch norm "
              "spreads it); --reference f64 judges reprise by torch fp32's own error")
    print(verdict, flush=True)
    if a.json:
        def num(v):
            return v if math.isfinite(v) else str(v)
        out = {"passed": passed, "tol": a.tol, "reference": reference, "verdict": verdict,
               "rel_err": {cls: {k: num(v) for k, v in e.items()} for cls, e in errs.items()}}
        if base:
            out["slack"] = a.slack
            out["torch_fp32_rel_err"] = {cls: {k: num(v) for k, v in e.items()}
                                         for cls, e in base.items()}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
