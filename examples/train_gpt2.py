#!/usr/bin/env python3
"""train_gpt2.py: the Python twin of examples/train_gpt2.cc.

Trains GPT-2 on llm.c token shards (tools/data/build_shards.py, docs/data.md) with the whole step
(forward, backward, AdamW with clipping, warm-up + cosine schedule) captured in one CUDA graph.
The loader reads the next batches on its own thread and writes each straight into the trainer's
pinned input buffers. Prints a progress line every --print_every steps, evaluates the validation
loss through a forward-only graph on the trainer's weights (Trainer.compile_forward), saves a
checkpoint and generates token ids from a prompt through the captured decode step
(tools/data/decode_tokens.py turns them into text). Needs the `reprise` module (pip install . from
the checkout, or PYTHONPATH=build/python) and a GPU.
"""

import argparse
import glob
import os
import sys
import time


import reprise
from reprise import data

models = reprise.models


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", default="data/shakespeare",
                   help="token shards: *_train_*.bin for training, *_val_*.bin for validation")
    p.add_argument("--small", action="store_true",
                   help="4 layers, 4 heads, 256 wide, context 256 (default: GPT-2 124M)")
    p.add_argument("--vocab", type=int, default=50257,
                   help="50257: GPT-2's BPE; 257: build_shards' byte tokens")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (B)")
    p.add_argument("--seq", type=int, default=0, help="tokens per sequence; 0: the context")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=6e-4, help="peak learning rate (AdamW)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--print_every", type=int, default=10)
    p.add_argument("--eval_every", type=int, default=50, help="0: only at the end")
    p.add_argument("--eval_batches", type=int, default=8)
    p.add_argument("--checkpoint", default="train_gpt2.ckpt", help="empty: none")
    p.add_argument("--prompt", default="50256", help="comma-separated token ids to continue")
    p.add_argument("--samples", type=int, default=2, help="sequences to generate (0: none)")
    p.add_argument("--generate_tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.8, help="0: greedy")
    p.add_argument("--top_k", type=int, default=40, help="0: all tokens")
    p.add_argument("--peak_tflops", type=float, default=989.0,
                   help="the GPU's dense bf16 peak for MFU (989: H100 and H200 SXM)")
    p.add_argument("--measure_matmul", type=int, choices=[0, 1], default=1,
                   help="1: time cuBLASLt's candidates for each product at the first run and keep "
                        "the choice in the kernel cache's folder for later runs")
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args(argv)
    for name, low in (("vocab", 2), ("batch", 1), ("seq", 0), ("steps", 1), ("warmup", 0),
                      ("print_every", 1), ("eval_every", 0), ("eval_batches", 1), ("samples", 0),
                      ("generate_tokens", 1), ("top_k", 0)):
        if getattr(args, name) < low:
            p.error(f"--{name} must be at least {low}, got {getattr(args, name)}")
    if args.vocab > 65536:
        p.error(f"--vocab must be at most 65536 (uint16 token ids), got {args.vocab}")
    for name in ("lr", "weight_decay", "temperature"):
        if not getattr(args, name) >= 0:
            p.error(f"--{name} must be a number >= 0, got {getattr(args, name)}")
    try:
        args.prompt_ids = [int(piece) for piece in args.prompt.split(",")]
    except ValueError:
        p.error(f"--prompt '{args.prompt}' is not a comma-separated list of token ids")
    return args


def shards(directory, part):
    if not os.path.isdir(directory):
        sys.exit(f"train_gpt2.py: --data_dir '{directory}' is not a directory; build the shards "
                 f"first: python3 tools/data/build_shards.py --out {directory} (docs/data.md)")
    files = sorted(glob.glob(os.path.join(directory, f"*{part}*.bin")))
    if not files:
        sys.exit(f"train_gpt2.py: --data_dir '{directory}' holds no *{part}*.bin shard")
    return files


def config_of(args):
    c = models.Gpt2Config(vocab=args.vocab, batch=args.batch)
    if args.small:
        c.layers, c.heads, c.width, c.max_positions = 4, 4, 256, 256
    c.seq = args.seq if args.seq > 0 else c.max_positions
    return c


def train_options(args):
    # A run shorter than the warm-up still decays: the cosine needs a step after the warm-up.
    schedule = reprise.LrSchedule(warmup_steps=min(args.warmup, args.steps - 1),
                                  decay=reprise.LrDecay.cosine, total_steps=args.steps,
                                  min_lr_factor=0.1)
    optimizer = reprise.OptimizerOptions(kind=reprise.OptimizerKind.adamw, learning_rate=args.lr,
                                         beta1=0.9, beta2=0.95, weight_decay=args.weight_decay,
                                         decay_rank1=False, max_grad_norm=1.0, schedule=schedule)
    dtype = reprise.DType.float32 if args.dtype == "f32" else reprise.DType.bfloat16
    options = reprise.TrainOptions(seed=args.seed, compute_dtype=dtype, optimizer=optimizer)
    options.kernels.measure_matmul_algorithms = bool(args.measure_matmul)
    return options


def evaluate(evaluator, gpt, reader, batches):
    reader.rewind()
    total = 0.0
    for _ in range(batches):
        tokens, targets = reader.next()
        evaluator.set_input("tokens", tokens)
        evaluator.set_input("targets", targets)
        evaluator.run()
        total += float(evaluator.read(gpt.loss))
    return total / batches


def main(argv):
    args = parse_args(argv)
    c = config_of(args)
    train_files, val_files = shards(args.data_dir, "_train_"), shards(args.data_dir, "_val_")
    loader = data.TokenLoader(train_files, batch_size=c.batch, sequence_length=c.seq,
                              vocab_size=c.vocab, seed=args.seed)
    validation = data.SequentialTokenReader(val_files, batch_size=c.batch, sequence_length=c.seq,
                                            vocab_size=c.vocab)
    eval_batches = min(args.eval_batches, validation.num_batches)  # The reader holds >= 1.
    if reprise.no_gpu_reason():
        sys.exit(f"train_gpt2.py: no CUDA device visible ({reprise.no_gpu_reason()}); "
                 "it needs an NVIDIA GPU")

    gpt = models.build_gpt2(c)
    start = time.perf_counter()
    trainer = reprise.Trainer.create(gpt.graph, gpt.loss, train_options(args))
    evaluator = trainer.compile_forward(gpt.graph, [gpt.loss])
    parameters = gpt.graph.num_parameter_elements
    print(f"GPT-2 {c.layers} layers, {c.heads} heads, {c.width} wide, vocab {c.vocab}: "
          f"{parameters} parameters; B={c.batch} T={c.seq} {args.dtype}; {len(train_files)} train"
          f" / {len(val_files)} val shards; ready in {time.perf_counter() - start:.1f} s")

    tokens_per_step = c.batch * c.seq
    # 6 FLOPs per parameter and token, and causal attention's 6 L C T (llm.c's count).
    flops_per_step = (6.0 * parameters + 6.0 * c.layers * c.width * c.seq) * tokens_per_step
    window_start, window_steps, train_start = time.perf_counter(), 0, time.perf_counter()
    for step in range(1, args.steps + 1):
        loader.next_into(trainer.input_buffer("tokens"), trainer.input_buffer("targets"))
        trainer.step()
        window_steps += 1
        if step % args.print_every == 0 or step == args.steps:
            loss = trainer.loss()  # Waits for the step.
            now = time.perf_counter()
            step_s = (now - window_start) / window_steps
            mfu = 100.0 * flops_per_step / step_s / (args.peak_tflops * 1e12)
            print(f"step {step:5d}/{args.steps}  loss {loss:.4f}  {1e3 * step_s:6.1f} ms/step  "
                  f"{tokens_per_step / step_s:8.0f} tokens/s  MFU {mfu:4.1f}%  "
                  f"ETA {step_s * (args.steps - step):.0f} s", flush=True)
            window_start, window_steps = now, 0
        if (args.eval_every > 0 and step % args.eval_every == 0) or step == args.steps:
            val = evaluate(evaluator, gpt, validation, eval_batches)
            print(f"step {step:5d}  validation loss {val:.4f} ({eval_batches} batches)")
            window_start = time.perf_counter()  # Evaluation time is not training time.
    print(f"trained {args.steps} steps in {time.perf_counter() - train_start:.1f} s; "
          f"{trainer.skipped_steps()} skipped for a non-finite loss or gradient")
    if args.checkpoint:
        trainer.save_checkpoint(args.checkpoint)
        print(f"checkpoint: {args.checkpoint}")
    if args.samples > 0:
        decode = config_of(args)
        decode.batch = args.samples
        generator = models.Gpt2Generator.create(trainer, decode)
        generated = generator.generate([args.prompt_ids] * args.samples, args.generate_tokens,
                                       temperature=args.temperature, top_k=args.top_k,
                                       seed=args.seed)
        print("tools/data/decode_tokens.py turns these lines into text:")
        for s, new in enumerate(generated):
            print(f"sample {s}: {' '.join(map(str, args.prompt_ids))} | "
                  f"{' '.join(map(str, new))}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (ValueError, KeyError, OSError, MemoryError, RuntimeError) as error:
        # The library's errors (a bad shard, a token outside the vocabulary, ...) name their cause.
        sys.exit(f"train_gpt2.py: {error.args[0] if error.args else error}")
