#!/usr/bin/env python3
"""Where one lane's time goes, by stage of the model and kind of launch, from the list of every
launch that `reprise-bench ... --timeline N --timeline_all` prints ("start ms, end ms, lane, node"
lines). Each launch's span (end - start, which includes the gap to its predecessor on that lane)
is summed per (stage, kind): the stage is the node name's first `--parts` dot-separated parts
(ResNet's "layer3", GPT-2's "h.7" with --parts 2), the kind one of batch_norm / conv / matmul /
attention / other forward or backward (a node whose name says grad, dgrad or wgrad is backward),
or update (the optimizer's launches, the gradient norm and the non-finite guard's).

    reprise-bench --model resnet ... --mode graph --timeline 10 --timeline_all > tl.txt
    python3 tools/bench/timeline_stages.py tl.txt [--lane 0] [--parts 1]
"""
import argparse
import re
import sys

LAUNCH = re.compile(r"^\s+(\d+\.\d+)\s+(\d+\.\d+)\s+lane (\d+)\s+(\S+)\s*$")
BACKWARD = re.compile(r"(^|[.+])(grad|dgrad|wgrad)(\b|_|\d)")


def launches(lines):
    """(start ms, end ms, lane, node) of every launch line, after the 'every launch' header."""
    out = []
    listing = False
    for line in lines:
        if "every launch, by start" in line:
            listing = True
            continue
        if not listing:
            continue
        match = LAUNCH.match(line)
        if match is None:
            if out:  # The listing ends at the first line that is not a launch.
                break
            continue
        start, end, lane, node = match.groups()
        out.append((float(start), float(end), int(lane), node))
    return out


OPTIMIZER = ("sgd", "adam", "grad_norm", "non_finite", "rng.")


def kind(node):
    """The family of a node by its name's words, then forward or backward (the optimizer's
    launches: "update")."""
    words = node.lower()
    if words.startswith(OPTIMIZER):
        return "update"
    if "bn" in re.split(r"[.+_]", words) or re.search(r"\bbn\d|batch_norm|downsample\.1", words):
        family = "batch_norm"
    elif "conv" in words:
        family = "conv"
    elif "attn" in words or "attention" in words:
        family = "attention"
    elif "fc" in words or "mlp" in words or "matmul" in words or "proj" in words:
        family = "matmul"
    else:
        family = "other"
    return family + (" backward" if BACKWARD.search(node) else " forward")


def stages(rows, lane, parts):
    """{(stage, kind): [launches, µs]} over `lane`'s launches."""
    table = {}
    for start, end, row_lane, node in rows:
        if row_lane != lane:
            continue
        stage = ".".join(node.split("+")[0].split(".")[:parts])
        entry = table.setdefault((stage, kind(node)), [0, 0.0])
        entry[0] += 1
        entry[1] += (end - start) * 1000.0
    return table


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", help="reprise-bench's output with --timeline_all")
    parser.add_argument("--lane", type=int, default=0)
    parser.add_argument("--parts", type=int, default=1, help="name parts that make a stage")
    args = parser.parse_args(argv)
    with open(args.timeline) as f:
        rows = launches(f)
    if not rows:
        print(f"timeline_stages: no launch list in {args.timeline} (run reprise-bench with "
              "--timeline N --timeline_all)", file=sys.stderr)
        return 1
    table = stages(rows, args.lane, args.parts)
    total = sum(us for _, us in table.values())
    print(f"lane {args.lane}: {sum(n for n, _ in table.values())} launches, {total:.1f} µs")
    print(f"{'stage':<16} {'kind':<22} {'launches':>8} {'µs':>10} {'share':>7}")
    for (stage, what), (n, us) in sorted(table.items(), key=lambda item: -item[1][1]):
        print(f"{stage:<16} {what:<22} {n:>8} {us:>10.1f} {100 * us / total:>6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
