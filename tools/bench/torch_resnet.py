#!/usr/bin/env python3
"""PyTorch reference timings for one ResNet training step on one CUDA GPU.

One step: zero_grad; forward through ResNet-<depth> (torchvision's, v1.5: a bottleneck block
strides in its 3x3 convolution) in train mode; CrossEntropyLoss (mean); backward; SGD(lr,
momentum, weight_decay) step. The model is torchvision.models.resnet<depth>(num_classes=classes)
when torchvision imports, else an in-script copy with the same structure, initialisation and
parameter names (--model picks). torch.backends.cudnn.benchmark is on. Precision:
  fp32   TF32 off for cuDNN convolutions and matmuls
  tf32   TF32 allowed for both
  bf16   torch.autocast("cuda", bfloat16, cache_enabled=False) around forward + loss, fp32 master
         weights and optimizer; TF32 off for what stays fp32
  fp16   the same in float16, with torch.amp.GradScaler (dynamic loss scaling, its defaults);
         graph modes step SGD(fused=True), whose step reads the scaler's flag on the device
Layout: nchw, or nhwc (model and inputs in torch.channels_last). Modes:
  eager          plain Python loop, SGD(foreach=True)
  graph          whole step captured in one torch.cuda.CUDAGraph (PyTorch's documented
                 recipe) and replayed; SGD(capturable=True) if available, else foreach
  compile_graph  torch.compile(mode=--compile-mode, by default "max-autotune-no-cudagraphs")
                 + SGD(fused=True),
                 captured whole-step the same way (compiling takes minutes; progress on stderr)
  checkpoint     eager, the model run as torch.utils.checkpoint.checkpoint_sequential over
                 --segments segments (use_reentrant=False): activations recomputed in backward
  compile_budget compile_graph with torch._functorch.config.activation_memory_budget =
                 --memory-budget (its automatic min-cut recomputation)
Each step is timed with CUDA events after warm-up (graph modes include the copy of the next
batch into the static inputs); inputs rotate over a few pre-generated random batches.
images_per_s = batch / median step time. peak_bytes = torch.cuda.max_memory_allocated over the
timed steps, including those batches (config.input_bytes) and whatever earlier modes left
allocated (base_bytes; use --modes X for one mode per process); setup_peak_bytes: the same over
setup and warm-up (compiling, cuDNN's autotuning). Exit status: 0 ok, 1 cannot run, 2 some
mode failed. One line per mode on stdout:
  torch <mode> depth=50 batch=32 precision=tf32 layout=nchw median_ms=X p90_ms=Y images_per_s=Z
  torch <mode> depth=50 batch=32 precision=tf32 layout=nchw error='...'

  python3 tools/bench/torch_resnet.py --depth 50 --batch 32 --precision tf32 --json t.json
"""
import argparse, contextlib, datetime, json, sys, time

import torch_step

try:
    import torch
    from torch import nn
except ImportError as e:  # reported in main()
    torch, nn, _IMPORT_ERROR = None, None, str(e)

MODES = ("eager", "graph", "compile_graph", "checkpoint", "compile_budget")
DEPTHS = (18, 34, 50, 101, 152)
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
LAYOUTS = ("nchw", "nhwc")
MODEL_SOURCES = ("auto", "torchvision", "builtin")
NUM_BATCHES = 4     # distinct input batches, rotated
# Blocks per stage, and whether the blocks are bottlenecks (1x1-3x3-1x1, 4x channels).
RESNET_STAGES = {18: ((2, 2, 2, 2), False), 34: ((3, 4, 6, 3), False),
                 50: ((3, 4, 6, 3), True), 101: ((3, 4, 23, 3), True),
                 152: ((3, 8, 36, 3), True)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch ResNet training-step benchmark (one CUDA GPU)")
    p.add_argument("--depth", type=int, default=50, choices=DEPTHS)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224, help="square images, at least 32")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="fp32: TF32 off; tf32: TF32 allowed; bf16, fp16: autocast, fp32 master "
                   "weights (fp16 with GradScaler)")
    p.add_argument("--layout", default="nchw", choices=LAYOUTS,
                   help="nhwc: model and inputs in torch.channels_last")
    p.add_argument("--iters", type=int, default=100, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before timing")
    p.add_argument("--modes", default=",".join(MODES), help="comma list of " + ", ".join(MODES))
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--model", default="auto", choices=MODEL_SOURCES,
                   help="auto: torchvision when it imports, else the in-script copy (builtin)")
    p.add_argument("--compile-mode", default="max-autotune-no-cudagraphs",
                   help="torch.compile mode of compile_graph ('default' compiles in about a minute)")
    p.add_argument("--segments", type=int, default=4, help="checkpoint: checkpoint_sequential's")
    p.add_argument("--memory-budget", type=float, default=0.5,
                   help="compile_budget: torch._functorch.config.activation_memory_budget")
    p.add_argument("--json", metavar="FILE", help="write results as JSON here")
    a = p.parse_args(argv)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.modes if m not in MODES]
    if bad or not a.modes:
        p.error(f"--modes: unknown {bad}; choose from {', '.join(MODES)}")
    if a.iters < 2 or a.warmup < 0 or a.batch < 1 or a.classes < 2 or a.image_size < 32:
        p.error("need --iters >= 2, --warmup >= 0, --batch >= 1, --classes >= 2, --image-size >= 32")
    return a


def build_builtin_resnet(depth, classes):
    """torchvision's ResNet (v1.5), written out here: same modules, names and initialisation."""
    stages, bottleneck = RESNET_STAGES[depth]

    def conv(cin, cout, k, stride):
        return nn.Conv2d(cin, cout, kernel_size=k, stride=stride, padding=k // 2, bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1, self.bn1 = conv(inplanes, planes, 3, stride), nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2, self.bn2 = conv(planes, planes, 3, 1), nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out += x if self.downsample is None else self.downsample(x)
            return self.relu(out)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1, self.bn1 = conv(inplanes, planes, 1, 1), nn.BatchNorm2d(planes)
            self.conv2, self.bn2 = conv(planes, planes, 3, stride), nn.BatchNorm2d(planes)
            self.conv3 = conv(planes, planes * 4, 1, 1)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            out += x if self.downsample is None else self.downsample(x)
            return self.relu(out)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            block = Bottleneck if bottleneck else BasicBlock
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            inplanes = 64
            for i, blocks in enumerate(stages):
                planes = 64 << i
                layers = []
                for j in range(blocks):
                    stride = 2 if i > 0 and j == 0 else 1
                    downsample = None
                    if stride != 1 or inplanes != planes * block.expansion:
                        downsample = nn.Sequential(conv(inplanes, planes * block.expansion, 1, stride),
                                                   nn.BatchNorm2d(planes * block.expansion))
                    layers.append(block(inplanes, planes, stride, downsample))
                    inplanes = planes * block.expansion
                setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * block.expansion, classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def import_torchvision(source="auto"):
    """torchvision's module when `source` lets it be used and it imports, else None. Raises
    ImportError when source="torchvision" and it does not import."""
    if source == "builtin":
        return None
    try:
        import torchvision
        return torchvision
    except Exception as e:  # ImportError, or a RuntimeError from a torch/torchvision mismatch
        if source == "torchvision":
            raise ImportError(f"torchvision does not import: {type(e).__name__}: {e}") from e
        return None


def model_source(source="auto"):
    """Where build_resnet(..., source) takes its model from, in words."""
    tv = import_torchvision(source)
    return "builtin" if tv is None else f"torchvision {tv.__version__}"


def build_resnet(depth, classes, source="auto"):
    """ResNet-<depth> on the CPU, in train mode: torchvision's, or the in-script copy."""
    tv = import_torchvision(source)
    if tv is None:
        return build_builtin_resnet(depth, classes)
    return getattr(tv.models, f"resnet{depth}")(num_classes=classes)


def build_model(a):
    torch.manual_seed(0)  # same initial weights in every mode
    model = build_resnet(a.depth, a.classes, a.model).cuda()
    if a.layout == "nhwc":
        model = model.to(memory_format=torch.channels_last)
    return model.train()


def autocast(a):
    # cache_enabled=False: casts made inside a graph capture must not outlive it (the PyTorch
    # docs ask for it with graphed callables); each weight is used once per step, so eager loses
    # nothing by it either.
    if a.precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if a.precision == "bf16" else torch.float16
        return torch.autocast(device_type="cuda", dtype=dtype, cache_enabled=False)
    return contextlib.nullcontext()


def make_scaler(a):
    """fp16's dynamic loss scaling (GradScaler's defaults: 65536, x2 every 2000 clean steps)."""
    return torch.amp.GradScaler("cuda") if a.precision == "fp16" else None


def make_loss(a):
    loss_fn = nn.CrossEntropyLoss()

    def loss_of(model, x, y):
        with autocast(a):
            return loss_fn(model(x), y)
    return loss_of


def make_sgd(params, a, **kw):
    return torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay, **kw)


def setup_eager(a, xs, ys):
    model, loss_of, scaler = build_model(a), make_loss(a), make_scaler(a)
    opt = make_sgd(model.parameters(), a, foreach=True)

    def step(i):
        opt.zero_grad(set_to_none=True)
        torch_step.backward_and_step(opt, loss_of(model, xs[i % NUM_BATCHES], ys[i % NUM_BATCHES]),
                                     scaler)
    return step, {"optimizer": "SGD(foreach=True)" + (" + GradScaler" if scaler else "")}


def setup_graph(a, xs, ys):
    model, scaler = build_model(a), make_scaler(a)
    if scaler is None:
        kw, name = torch_step.capturable_sgd_kwargs()
    else:  # GradScaler.step syncs with the host unless the optimizer is fused.
        kw, name = {"fused": True}, "SGD(fused=True) + GradScaler"
    opt = make_sgd(model.parameters(), a, **kw)
    return (torch_step.capture_step(model, opt, make_loss(a), xs, ys, scaler),
            {"optimizer": name})


def setup_compile_graph(a, xs, ys):
    model = torch.compile(build_model(a), mode=a.compile_mode)
    opt, scaler = make_sgd(model.parameters(), a, fused=True), make_scaler(a)
    # Compile (forward and backward) once on the default stream before the capture recipe.
    progress(f"compile_graph: compiling forward and backward ({a.compile_mode}; can take minutes)")
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    torch_step.backward_and_step(opt, make_loss(a)(model, xs[0], ys[0]), scaler)
    torch.cuda.synchronize()
    progress(f"compile_graph: compiled in {time.perf_counter() - t0:.1f} s; capturing")
    return (torch_step.capture_step(model, opt, make_loss(a), xs, ys, scaler),
            {"optimizer": "SGD(fused=True)" + (" + GradScaler" if scaler else "")})


def as_sequential(model):
    """The ResNet as one nn.Sequential of its stages (same modules), for checkpoint_sequential."""
    return nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool, model.layer1,
                         model.layer2, model.layer3, model.layer4, model.avgpool, nn.Flatten(1),
                         model.fc)


def setup_checkpoint(a, xs, ys):
    from torch.utils.checkpoint import checkpoint_sequential
    model, scaler = build_model(a), make_scaler(a)
    for m in model.modules():  # A segment's input must survive to its recomputation.
        if isinstance(m, nn.ReLU):
            m.inplace = False
    sequential, loss_fn = as_sequential(model), nn.CrossEntropyLoss()
    opt = make_sgd(model.parameters(), a, foreach=True)

    def step(i):
        opt.zero_grad(set_to_none=True)
        with autocast(a):
            logits = checkpoint_sequential(sequential, a.segments, xs[i % NUM_BATCHES],
                                           use_reentrant=False)
            loss = loss_fn(logits, ys[i % NUM_BATCHES])
        torch_step.backward_and_step(opt, loss, scaler)
    return step, {"optimizer": "SGD(foreach=True)", "segments": a.segments}


def setup_compile_budget(a, xs, ys):
    import torch._functorch.config as functorch_config
    previous = functorch_config.activation_memory_budget
    functorch_config.activation_memory_budget = a.memory_budget
    try:
        step, info = setup_compile_graph(a, xs, ys)  # Compiles (and partitions) here.
    finally:
        functorch_config.activation_memory_budget = previous
    return step, {**info, "activation_memory_budget": a.memory_budget}


SETUP = {"eager": setup_eager, "graph": setup_graph, "compile_graph": setup_compile_graph,
         "checkpoint": setup_checkpoint, "compile_budget": setup_compile_budget}


def progress(msg):
    print(f"torch_resnet: {msg}", file=sys.stderr, flush=True)


def run_mode(mode, a, xs, ys):
    r = torch_step.run_mode(mode, lambda: SETUP[mode](a, xs, ys), a.warmup, a.iters, progress)
    if "median_ms" in r:
        r["images_per_s"] = a.batch / (r["median_ms"] / 1000.0)
    return r


def main():
    a = parse_args()
    config = {k: getattr(a, k) for k in ("depth", "batch", "image_size", "classes", "precision",
                                         "layout", "iters", "warmup", "modes", "lr", "momentum",
                                         "weight_decay", "compile_mode")}
    config["dtype"] = "float32"  # parameters, gradients and optimizer state (bf16, fp16: autocast)
    if torch is None or not torch.cuda.is_available():
        why = f"torch is not installed ({_IMPORT_ERROR})" if torch is None else "no CUDA GPU visible"
        print(f"torch_resnet: error: {why}", file=sys.stderr)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"error": why, "config": config}, f, indent=2)
        return 1
    try:
        config["model"] = model_source(a.model)
    except ImportError as e:
        why = f"--model torchvision: {e}"
        print(f"torch_resnet: error: {why}", file=sys.stderr)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"error": why, "config": config}, f, indent=2)
        return 1

    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    g = torch.Generator(device="cuda").manual_seed(1)
    shape = (a.batch, 3, a.image_size, a.image_size)
    fmt = torch.channels_last if a.layout == "nhwc" else torch.contiguous_format
    xs = [torch.randn(shape, device="cuda", generator=g).contiguous(memory_format=fmt)
          for _ in range(NUM_BATCHES)]
    ys = [torch.randint(0, a.classes, (a.batch,), device="cuda", generator=g) for _ in range(NUM_BATCHES)]
    config["input_bytes"] = sum(t.numel() * t.element_size() for t in xs + ys)

    results = {}
    for mode in a.modes:
        r = results[mode] = run_mode(mode, a, xs, ys)
        head = f"torch {mode} depth={a.depth} batch={a.batch} precision={a.precision} layout={a.layout}"
        if "error" in r:
            print(f"{head} error={r['error']!r}", flush=True)
        else:
            print(f"{head} median_ms={r['median_ms']:.4f} p90_ms={r['p90_ms']:.4f} "
                  f"images_per_s={r['images_per_s']:.1f} peak_mib={r['peak_bytes'] / 2**20:.0f} "
                  f"base_mib={r['base_bytes'] / 2**20:.0f} "
                  f"setup_peak_mib={r['setup_peak_bytes'] / 2**20:.0f}", flush=True)

    if a.json:
        out = {"framework": "torch", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "config": config, "results": results}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if all("error" not in r for r in results.values()) else 2


if __name__ == "__main__":
    sys.exit(main())
