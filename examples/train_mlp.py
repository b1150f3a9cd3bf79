#!/usr/bin/env python3
"""train_mlp.py: the Python twin of examples/train_mlp.cc.

Trains an MLP classifier on interleaved spirals with the whole training step captured into one
CUDA graph, then times the same plan run sync, bulked and as a graph, and checks that bulked and
graph runs give the same bits. Needs the `reprise` module (pip install . from the checkout, or
PYTHONPATH=build/python after a build with nanobind installed) and a GPU.
"""

import argparse
import sys

import numpy as np

import reprise


class Spirals:
    """K interleaved spiral arms in the plane: only a network with hidden layers separates them."""

    def __init__(self, classes, seed):
        self.classes = classes
        self.rng = np.random.default_rng(seed)

    def next(self, batch):
        k = self.rng.integers(0, self.classes, batch)
        t = self.rng.random(batch, dtype=np.float32)
        angle = 3.5 * t + 2.0 * np.pi * k / self.classes
        noise = self.rng.normal(0.0, 0.04, (batch, 2))
        x = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) + noise
        return x.astype(np.float32), k.astype(np.int32)


def make_run(args, mode):
    mlp = reprise.models.mlp(batch=args.batch, input_features=2, depth=args.depth,
                             width=args.width, classes=args.classes)
    options = reprise.TrainOptions(mode=mode, fetch=[mlp.logits])
    options.optimizer.learning_rate = args.lr
    return mlp, reprise.Trainer.create(mlp.graph, mlp.loss, options)


def train(args):
    mlp, trainer = make_run(args, reprise.ExecMode.graph)
    print(f"MLP {args.depth} x {args.width} on {args.classes}-arm spirals, batch {args.batch}, "
          f"SGD lr {args.lr:.3g} momentum 0.9, {args.steps} steps, captured as one CUDA graph")
    data = Spirals(args.classes, seed=1)
    correct = seen = 0
    measure_from = args.steps - min(args.steps, 100)
    for step in range(args.steps):
        x, y = data.next(args.batch)
        trainer.set_input("features", x)
        trainer.set_input("labels", y)
        trainer.step()
        if (step + 1) % args.print_every == 0:
            print(f"step {step + 1:5d}  loss {trainer.loss():.4f}")
        if step >= measure_from:
            # The logits come from weights that had not yet seen this batch: held-out accuracy.
            logits = trainer.read(mlp.logits).reshape(args.batch, args.classes)
            correct += int((logits.argmax(axis=1) == y).sum())
            seen += args.batch
    print(f"accuracy on the last {seen} unseen samples: {100.0 * correct / seen:.1f}%")
    if args.verify > 0:
        result = trainer.verify(args.verify)
        print(result)
        if not result.ok:
            print("train_mlp.py: verify mode found a difference", file=sys.stderr)
            return 1
    print(trainer.report(), end="")

    # The same plan three ways; bulked and graph must agree bit for bit.
    print("\nms/step (median of 200 CUDA-event-timed steps after 20 warm-up):")
    x, y = data.next(args.batch)  # One batch for all three modes, so their weights compare.
    weights = {}
    for mode in (reprise.ExecMode.sync, reprise.ExecMode.bulked, reprise.ExecMode.graph):
        _, timed = make_run(args, mode)
        timed.set_input("features", x)
        timed.set_input("labels", y)
        timed.time_steps(20)
        ms = float(np.median(timed.time_steps(200)))
        weights[mode] = timed.get_parameter("fc0.weight")
        print(f"  {mode.name:<7} {ms:.4f} ms  ({timed.stats().launches_per_step} launches/step)")
    equal = np.array_equal(weights[reprise.ExecMode.bulked], weights[reprise.ExecMode.graph])
    print(f"bulked and graph weights after 220 steps are bitwise equal: {'yes' if equal else 'NO'}")
    return 0 if equal else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500, help="training steps with capture")
    parser.add_argument("--batch", type=int, default=256, help="batch size")
    parser.add_argument("--depth", type=int, default=4, help="hidden layers")
    parser.add_argument("--width", type=int, default=256, help="hidden width")
    parser.add_argument("--classes", type=int, default=3, help="spiral arms")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate")
    parser.add_argument("--print_every", type=int, default=100,
                        help="print the loss every N steps")
    parser.add_argument("--verify", type=int, default=0,
                        help="after training, run N steps captured and N eagerly from the same "
                             "state and compare every tensor bit for bit; exit 1 on a difference")
    args = parser.parse_args()
    for name in ("steps", "batch", "depth", "width", "classes", "print_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.verify < 0:
        parser.error("--verify must be 0 or more")
    reason = reprise.no_gpu_reason()
    if reason:
        print(f"train_mlp.py: no CUDA device visible ({reason}); it needs an NVIDIA GPU "
              "(compute capability 8.0 or newer)", file=sys.stderr)
        return 2
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
