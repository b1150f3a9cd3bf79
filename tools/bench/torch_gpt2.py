#!/usr/bin/env python3
"""PyTorch reference timings for one GPT-2 training step on one CUDA GPU (a nanoGPT-style model
written here).

Model: token and position embeddings, L blocks of pre-LayerNorm causal self-attention
(F.scaled_dot_product_attention(is_causal=True)) and a 4x GELU(tanh) MLP, a final LayerNorm and
an output projection tied to the token embedding; parameter names and layouts as nanoGPT's
(transformer.wte.weight, transformer.h.0.attn.c_attn.weight [3C, C], ..., lm_head tied to wte).
Initialisation N(0, 0.02), residual projections (c_proj) N(0, 0.02/sqrt(2L)), zero biases.
GPT-2 124M by default (12 layers, 12 heads, 768 wide, vocabulary 50,257, 1,024 positions:
124,439,808 parameters), its embedding and output rows padded to 50,304 (--pad-vocab-to 64) as
nanoGPT and llm.c train it: the output matmuls then run on aligned shapes (eager PyTorch took
69 ms per step at B=16, T=1024 unpadded on an H200); tokens stay below 50,257, and the padded
rows, never a target, only learn to stay unlikely.

One step: zero_grad; forward (bf16 autocast by default, parameters and optimizer float32);
mean cross-entropy over B·T random tokens (targets random too); backward; global gradient-norm
clipping at 1.0 (clip_grad_norm_, foreach); AdamW (fused, betas 0.9/0.95, eps 1e-8, weight decay
0.1 on the 2-D weights only) with a learning rate of linear warm-up then cosine decay, reprise's
LrSchedule formula (lr_factor below). Modes:
  eager          the plain Python loop
  compile        torch.compile(model, mode=--compile-mode) in the same loop (the optimizer is
                 fused already; compiling takes about a minute, reported as compile_s)
  compile_graph  the compiled model, with the whole step (forward, backward, clipping, the
                 scheduled rate computed from a device-side step counter, AdamW with
                 capturable=True and the rate as a device tensor) captured in one
                 torch.cuda.CUDAGraph (PyTorch's documented recipe, as torch_resnet.py does) and
                 replayed; the next batch is copied into the static inputs inside the timed step
  graph          the same capture of the eager model (not in the default modes)
Timing: CUDA events around each step after --warmup untimed steps, median (and p90) of --steps.
tokens_per_s = B·T / median; MFU with gpt2_flops.py's formula (llm.c's 6·N + 6·L·C·T FLOPs per
token) over the GPU's dense bf16 peak (989.4 TFLOP/s on an H100 SXM or H200; --peak-tflops for
others). Exit status: 0 ok, 1 cannot run, 2 some mode failed. One line per mode on stdout:
  torch <mode> batch=16 seq=1024 ... median_ms=X p90_ms=Y tokens_per_s=Z mfu=W ...

  python3 tools/bench/torch_gpt2.py --batch 16 --seq 1024 --json torch_gpt2.json
"""
import argparse, contextlib, datetime, json, math, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_flops  # noqa: E402
import torch_step  # noqa: E402

try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError as e:  # reported in main()
    torch, nn, F, _IMPORT_ERROR = None, None, None, str(e)

MODES = ("eager", "compile", "compile_graph", "graph")
DEFAULT_MODES = "eager,compile,compile_graph"
PRECISIONS = ("bf16", "fp32", "tf32")
NUM_BATCHES = 4  # distinct random batches, rotated


def progress(msg):
    print(f"torch_gpt2: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The model.

if nn is not None:
    class CausalSelfAttention(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads = heads
            self.c_attn = nn.Linear(width, 3 * width)  # q, k, v for all heads, in that order
            self.c_proj = nn.Linear(width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            # [B, T, C] -> [B, heads, T, C / heads]
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class Mlp(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.c_fc = nn.Linear(width, 4 * width)
            self.c_proj = nn.Linear(4 * width, width)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = CausalSelfAttention(width, heads)
            self.ln_2 = nn.LayerNorm(width)
            self.mlp = Mlp(width)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Gpt2(nn.Module):
        def __init__(self, layers=12, heads=12, width=768, vocab=50257, positions=1024):
            super().__init__()
            if width % heads:
                raise ValueError(f"width {width} is not a multiple of heads {heads}")
            self.positions = positions
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, width),
                wpe=nn.Embedding(positions, width),
                h=nn.ModuleList(Block(width, heads) for _ in range(layers)),
                ln_f=nn.LayerNorm(width)))
            self.lm_head = nn.Linear(width, vocab, bias=False)
            self.lm_head.weight = self.transformer.wte.weight  # tied: one tensor, two uses
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                    nn.init.normal_(p, mean=0.0, std=std)

        def forward(self, tokens, targets):
            """Mean cross-entropy of the next-token logits; tokens, targets [B, T] int64."""
            t = tokens.shape[1]
            if t > self.positions:
                raise ValueError(f"sequence of {t} tokens is longer than the context "
                                 f"{self.positions}")
            pos = torch.arange(t, device=tokens.device)
            x = self.transformer.wte(tokens) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def build_gpt2(layers=12, heads=12, width=768, vocab=50257, positions=1024, seed=0):
    """The model on the CPU, float32, initialised from `seed`."""
    torch.manual_seed(seed)
    return Gpt2(layers, heads, width, vocab, positions)


def lr_factor(step, warmup, total, min_factor):
    """reprise's LrSchedule (include/reprise/optimizer.h): (s+1)/warmup during the warm-up, then
    half a cosine from 1 to min_factor over the remaining total - warmup steps."""
    if step < warmup:
        return (step + 1) / warmup
    if total <= warmup:
        return 1.0
    d = min(1.0, (step - warmup) / (total - warmup))
    return min_factor + (1 - min_factor) * (1 + math.cos(math.pi * d)) / 2


def device_lr(step_t, base, warmup, total, min_factor):
    """lr_factor on the device, from a float32 step counter, for a captured step."""
    warm = (step_t + 1) / max(warmup, 1)
    d = torch.clamp((step_t - warmup) / max(total - warmup, 1), 0.0, 1.0)
    cosine = min_factor + (1 - min_factor) * (1 + torch.cos(math.pi * d)) / 2
    return base * torch.where(step_t < warmup, warm, cosine)


def make_adamw(model, lr, weight_decay, fused, capturable=False):
    """AdamW with weight decay on the 2-D weights (matmul weights, embeddings) only; capturable
    for a step inside a CUDA graph capture (Adam's step refuses to be captured otherwise)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kw = {"fused": True, "capturable": capturable} if fused else {"foreach": False}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def autocast(precision, device_type="cuda"):
    # cache_enabled=False: casts made inside a graph capture must not outlive it.
    if precision == "bf16":
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# The benchmark.

def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch GPT-2 training-step benchmark (one CUDA GPU)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence (T)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50257, help="vocabulary (GPT-2's 50257)")
    p.add_argument("--pad-vocab-to", type=int, default=64,
                   help="round the embedding and output rows up to a multiple of this, as nanoGPT "
                   "(50304) and llm.c do for aligned matmuls; tokens stay below --vocab and MFU "
                   "counts the real vocabulary's parameters (1: no padding)")
    p.add_argument("--positions", type=int, default=1024, help="context of the model (wpe rows)")
    p.add_argument("--precision", default="bf16", choices=PRECISIONS,
                   help="bf16: autocast, TF32 for what stays fp32; fp32: TF32 off; tf32: allowed")
    p.add_argument("--modes", default=DEFAULT_MODES, help="comma list of " + ", ".join(MODES))
    p.add_argument("--steps", type=int, default=50, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before timing")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--lr-warmup", type=int, default=10, help="warm-up steps of the schedule")
    p.add_argument("--lr-total", type=int, default=1000, help="steps of the cosine schedule")
    p.add_argument("--min-lr-factor", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--compile-mode", default="default", help="torch.compile mode")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's dense bf16 peak for MFU (default: from its name)")
    p.add_argument("--json", metavar="FILE", help="write results as JSON here")
    a = p.parse_args(argv)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.modes if m not in MODES]
    if bad or not a.modes:
        p.error(f"--modes: unknown {bad}; choose from {', '.join(MODES)}")
    if a.steps < 2 or a.warmup < 0 or min(a.batch, a.seq, a.layers, a.heads, a.width, a.vocab) < 1:
        p.error("need --steps >= 2, --warmup >= 0 and positive sizes")
    if a.width % a.heads:
        p.error(f"--width {a.width} is not a multiple of --heads {a.heads}")
    if a.seq > a.positions:
        p.error(f"--seq {a.seq} is longer than --positions {a.positions}")
    if a.pad_vocab_to < 1:
        p.error("--pad-vocab-to must be at least 1")
    a.padded_vocab = -(-a.vocab // a.pad_vocab_to) * a.pad_vocab_to
    return a


class Setup:
    """What every mode builds: the model on the GPU, its optimizer and one step's pieces."""

    def __init__(self, a, compiled, captured):
        self.a = a
        self.model = build_gpt2(a.layers, a.heads, a.width, a.padded_vocab,
                                a.positions).cuda().train()
        self.params = [p for p in self.model.parameters()]
        self.forward = torch.compile(self.model, mode=a.compile_mode) if compiled else self.model
        self.opt = make_adamw(self.model, a.lr, a.weight_decay, fused=True, capturable=captured)

    def loss(self, x, y):
        with autocast(self.a.precision):
            return self.forward(x, y)

    def clip(self):
        torch.nn.utils.clip_grad_norm_(self.params, 1.0, foreach=True)


def eager_step(s, xs, ys):
    a = s.a

    def step(i):
        for g in s.opt.param_groups:
            g["lr"] = a.lr * lr_factor(i, a.lr_warmup, a.lr_total, a.min_lr_factor)
        s.opt.zero_grad(set_to_none=True)
        s.loss(xs[i % NUM_BATCHES], ys[i % NUM_BATCHES]).backward()
        s.clip()
        s.opt.step()
    return step


def compile_first(s, xs, ys):
    """Runs one step so that torch.compile compiles forward and backward now; returns seconds."""
    progress(f"compiling forward and backward (torch.compile mode {s.a.compile_mode}; "
             "about a minute)")
    t0 = time.perf_counter()
    s.opt.zero_grad(set_to_none=True)
    s.loss(xs[0], ys[0]).backward()
    torch.cuda.synchronize()
    s.opt.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - t0
    progress(f"compiled in {seconds:.1f} s")
    return seconds


def graph_step(s, xs, ys):
    """The whole step in one CUDA graph; the learning rate comes from a device step counter."""
    a = s.a
    lr_t = torch.tensor(a.lr, device="cuda")
    for g in s.opt.param_groups:
        g["lr"] = lr_t  # fused AdamW reads a tensor rate on the device
    step_t = torch.zeros((), device="cuda")
    static_x, static_y = xs[0].clone(), ys[0].clone()

    def body():
        loss = s.loss(static_x, static_y)
        loss.backward()
        s.clip()
        lr_t.copy_(device_lr(step_t, a.lr, a.lr_warmup, a.lr_total, a.min_lr_factor))
        s.opt.step()
        step_t.add_(1)
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (optimizer state, cuBLAS, autotuning) off capture
        for _ in range(torch_step.CAPTURE_WARMUP):
            s.opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    step_t.zero_()
    g = torch.cuda.CUDAGraph()
    s.opt.zero_grad(set_to_none=True)  # the captured backward then writes fresh .grad each replay
    with torch.cuda.graph(g):
        static_loss = body()

    def step(i):
        static_x.copy_(xs[i % NUM_BATCHES])
        static_y.copy_(ys[i % NUM_BATCHES])
        g.replay()
    step.keep_alive = (g, static_loss, lr_t, step_t)
    return step


def setup_mode(mode, a, xs, ys):
    captured = mode in ("graph", "compile_graph")
    s = Setup(a, compiled=mode in ("compile", "compile_graph"), captured=captured)
    info = {"optimizer": f"AdamW(fused=True{', capturable=True' if captured else ''}), "
                         "clip_grad_norm_(1.0, foreach=True)"}
    if mode in ("compile", "compile_graph"):
        info["compile_s"] = compile_first(s, xs, ys)
        info["compile_mode"] = a.compile_mode
    if mode in ("eager", "compile"):
        return eager_step(s, xs, ys), info
    return graph_step(s, xs, ys), info


def main():
    a = parse_args()
    params = gpt2_flops.num_parameters(a.layers, a.width, a.vocab, a.positions)
    config = {"model": "gpt2", "batch": a.batch, "seq": a.seq, "layers": a.layers,
              "heads": a.heads, "width": a.width, "vocab": a.vocab,
              "padded_vocab": a.padded_vocab, "positions": a.positions,
              "params": params, "precision": a.precision, "modes": a.modes, "steps": a.steps,
              "warmup": a.warmup, "lr": a.lr, "lr_warmup": a.lr_warmup, "lr_total": a.lr_total,
              "min_lr_factor": a.min_lr_factor, "weight_decay": a.weight_decay,
              "compile_mode": a.compile_mode, "inputs": "random tokens"}
    if torch is None or not torch.cuda.is_available():
        why = (f"torch is not installed ({_IMPORT_ERROR})" if torch is None
               else "no CUDA GPU visible")
        print(f"torch_gpt2: error: {why}", file=sys.stderr)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"framework": "torch", "tool": "torch_gpt2.py", "error": why,
                           "config": config}, f, indent=2)
        return 1
    tf32 = a.precision in ("tf32", "bf16")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    gpu = torch.cuda.get_device_name()
    peak = gpt2_flops.peak_tflops(gpu, a.peak_tflops)
    progress(f"GPT-2 {a.layers}L {a.heads}H {a.width}C vocab {a.vocab} (rows padded to "
             f"{a.padded_vocab}): {params:,} parameters; "
             f"B={a.batch} T={a.seq} {a.precision} on {gpu}; MFU: {gpt2_flops.FORMULA} over "
             f"{peak if peak else '?'} TFLOP/s")
    g = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
          for _ in range(NUM_BATCHES)]
    ys = [torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
          for _ in range(NUM_BATCHES)]

    results = {}
    for mode in a.modes:
        t0 = time.perf_counter()
        r = torch_step.run_mode(mode, lambda: setup_mode(mode, a, xs, ys), a.warmup, a.steps,
                                progress)
        r["wall_s"] = time.perf_counter() - t0
        head = (f"torch {mode} batch={a.batch} seq={a.seq} layers={a.layers} heads={a.heads} "
                f"width={a.width} vocab={a.vocab} padded_vocab={a.padded_vocab} "
                f"precision={a.precision}")
        if "error" in r:
            print(f"{head} error={r['error']!r}", flush=True)
        else:
            r["tokens_per_s"], r["mfu"] = gpt2_flops.from_config(config, r["median_ms"], gpu,
                                                                 a.peak_tflops)
            mfu = "?" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
            print(f"{head} median_ms={r['median_ms']:.4f} p90_ms={r['p90_ms']:.4f} "
                  f"tokens_per_s={r['tokens_per_s']:.0f} mfu={mfu} "
                  f"peak_mib={r['peak_bytes'] / 2**20:.0f} setup_s={r['setup_s']:.1f} "
                  f"wall_s={r['wall_s']:.1f}", flush=True)
        results[mode] = r

    if a.json:
        out = {"framework": "torch", "tool": "torch_gpt2.py", "gpu": gpu,
               "torch": torch.__version__, "cuda": torch.version.cuda,
               "cudnn": torch.backends.cudnn.version(),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "mfu_formula": gpt2_flops.FORMULA, "peak_tflops": peak,
               "config": config, "results": results}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if all("error" not in r for r in results.values()) else 2


if __name__ == "__main__":
    sys.exit(main())
