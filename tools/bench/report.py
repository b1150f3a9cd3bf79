#!/usr/bin/env python3
"""Turns reprise-bench, torch_mlp.py, torch_resnet.py and jax_mlp.py JSON files into the markdown table of
docs/benchmarks.md (ms per step, one row per configuration) and, with --plot, a PNG bar chart.

  python3 tools/bench/report.py docs/results/*.json --plot docs/results/mlp.png

Columns are every (framework, mode) found; a file that recorded an error shows it in place of a
number. Exit status: 0 ok, 1 bad input (unreadable file, no results), 2 --plot without matplotlib.
"""
import argparse, json, sys


def load(paths):
    rows, columns = {}, []
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"report: cannot read {path}: {e}")
        key = workload(data.get("config", {}))
        framework = data.get("framework") or ("reprise" if data.get("tool") == "reprise-bench" else "?")
        for mode, r in data.get("results", {}).items():
            column = f"{framework} {mode}"
            if column not in columns:
                columns.append(column)
            value = r.get("median_ms") if isinstance(r, dict) else None
            rows.setdefault(key, {})[column] = value if value is not None else r.get("error", "?")
    if not rows:
        sys.exit("report: no results in the given files")
    return rows, columns


def workload(c):
    """The row a result belongs to, named from its configuration: an MLP's depth × width, or a
    ResNet's depth, image size and layout (reprise records model "resnet"; torch_resnet.py records
    image_size and precision), with the batch and precision (bf16 or fp16 before TF32: a 16-bit
    run may also allow TF32 in what stays float32)."""
    tf32 = bool(c.get("tf32", False)) or c.get("precision") == "tf32"
    bf16 = bool(c.get("bf16", False)) or c.get("precision") == "bf16"
    fp16 = bool(c.get("fp16", False)) or c.get("precision") == "fp16"
    precision = " (bf16)" if bf16 else (" (fp16)" if fp16 else (" (TF32)" if tf32 else ""))
    if c.get("model") == "resnet" or (c.get("model") != "mlp" and "image_size" in c):
        layout = str(c.get("layout", "nchw")).upper()
        return (f"ResNet-{c.get('depth')} {c.get('image_size')}² {layout}, batch {c.get('batch')}"
                + precision)
    return f"MLP {c.get('depth')}×{c.get('width')}, batch {c.get('batch')}" + precision


def table(rows, columns):
    lines = ["| workload | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, values in sorted(rows.items()):
        cells = []
        for column in columns:
            v = values.get(column)
            cells.append("" if v is None else (f"{v:.3f}" if isinstance(v, (int, float)) else str(v)))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows, columns, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: --plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    keys = sorted(rows)
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(columns)), 4))
    width = 0.8 / max(1, len(keys))
    for i, key in enumerate(keys):
        values = [rows[key].get(c) if isinstance(rows[key].get(c), (int, float)) else 0 for c in columns]
        ax.bar([x + i * width for x in range(len(columns))], values, width, label=key)
    ax.set_xticks([x + width * (len(keys) - 1) / 2 for x in range(len(columns))])
    ax.set_xticklabels(columns, rotation=30, ha="right")
    ax.set_ylabel("ms per training step")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--plot", help="write a PNG bar chart here")
    a = p.parse_args()
    rows, columns = load(a.files)
    print(table(rows, columns))
    return plot(rows, columns, a.plot) if a.plot else 0


if __name__ == "__main__":
    sys.exit(main())
