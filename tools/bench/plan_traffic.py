#!/usr/bin/env python3
"""The bytes each kind of launch moves in one step of a plan, from `reprise-dump --stage plan
--format json`: what it reads (its inputs, each once) and writes (its outputs; for an op that
updates in place, the parameters and state it reads), summed per op, largest first. The
parameters' kept 16-bit copies are only written by the update, and refreshed only after the host
wrote the weights (src/passes/parameter_copies.h), so a step's refresh_copies reads just its flag. A lower bound
on a step's memory traffic: a kernel that reads a tensor twice, or spills, moves more. Where a step
runs against the GPU's power cap (tools/device/clocks_and_power.sh), the ops at the top are where
less energy per step has to come from.

    python3 tools/bench/plan_traffic.py PLAN.json [--top N] [--gbps G]

`--gbps` (default 3500) turns each op's bytes into the time it needs at that bandwidth.
"""
import argparse
import json
import sys

DTYPE_BYTES = {"f64": 8, "f32": 4, "i32": 4, "bf16": 2, "f16": 2}  # DTypeName's names.
MUTABLE_LEAVES = ("parameter", "state")


def spec_bytes(spec):
    count = 1
    for extent in spec["shape"]:
        count *= extent
    if spec["dtype"] not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {spec['dtype']!r}")
    return count * DTYPE_BYTES[spec["dtype"]]


def written_positions(node):
    """The inputs a launch writes without reading them: adam_multi's 16-bit parameter copies."""
    copies = node.get("attrs", {}).get("copies", 0) if node["op"] == "adam_multi" else 0
    last = len(node["inputs"]) - 1  # The copies' stale flag, read and written.
    return set(range(last - copies, last)) if copies else set()


def traffic(dump):
    """[(op, launches, bytes read, bytes written)] over the plan's launches, largest total first."""
    if dump.get("stage") not in ("plan", "cuda-graph") or "plan" not in dump:
        raise ValueError("not a plan dump: run reprise-dump with --stage plan --format json")
    nodes = dump["nodes"]
    per_op = {}
    for launch in dump["plan"]["launches"]:
        node = nodes[launch["node"]]
        read = written = 0
        seen = set()
        write_only = written_positions(node)
        inputs = node["inputs"]
        refresh = node["op"] == "refresh_copies"
        if refresh:  # It reads its flag and, only after the host wrote the weights, casts them.
            inputs = inputs[-1:]
        for position, value in enumerate(inputs):
            key = (value["node"], value["output"])
            if key in seen:
                continue
            seen.add(key)
            producer = nodes[value["node"]]
            size = spec_bytes(producer["outputs"][value["output"]])
            if position not in write_only:
                read += size
            if not node["outputs"] and producer["op"] in MUTABLE_LEAVES and not refresh:
                written += size
        written += sum(spec_bytes(spec) for spec in node["outputs"])
        entry = per_op.setdefault(node["op"], [0, 0, 0])
        entry[0] += 1
        entry[1] += read
        entry[2] += written
    rows = [(op, n, r, w) for op, (n, r, w) in per_op.items()]
    rows.sort(key=lambda row: (-(row[2] + row[3]), row[0]))
    return rows


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--top", type=int, default=0, help="print only the N largest (0: all)")
    parser.add_argument("--gbps", type=float, default=3500.0)
    args = parser.parse_args(argv)
    try:
        with open(args.plan, encoding="utf-8") as f:
            rows = traffic(json.load(f))
    except (OSError, ValueError, KeyError) as e:
        print(f"plan_traffic: {args.plan}: {e}", file=sys.stderr)
        return 1
    total = sum(r + w for _, _, r, w in rows)
    print(f"{'op':<34} {'launches':>8} {'read GB':>9} {'written GB':>10} {'share':>6} "
          f"{'ms at ' + format(args.gbps, 'g') + ' GB/s':>16}")
    for op, n, r, w in rows[:args.top or None]:
        print(f"{op:<34} {n:>8} {r / 1e9:>9.3f} {w / 1e9:>10.3f} {(r + w) / max(total, 1):>6.1%} "
              f"{(r + w) / (args.gbps * 1e6):>16.3f}")
    print(f"{'step':<34} {sum(n for _, n, _, _ in rows):>8} "
          f"{sum(r for _, _, r, _ in rows) / 1e9:>9.3f} {sum(w for *_, w in rows) / 1e9:>10.3f} "
          f"{'':>6} {total / (args.gbps * 1e6):>16.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
