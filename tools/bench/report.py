#!/usr/bin/env python3
"""Turns the JSON files the benchmark tools write into markdown tables and, with --plot, a PNG bar
chart of the step times.

  python3 tools/bench/report.py docs/results/*.json --plot /tmp/steps.png

It reads, by their shape:
- step times (ms per step per mode) from reprise-bench, torch_mlp.py, torch_resnet.py,
  torch_ensemble.py, jax_mlp.py and jax_ensemble.py: one row per workload and GPU, one column per
  (framework, mode); a mode that recorded an error shows it in place of a number;
- data-parallel scaling from reprise-dp-bench and torch_ddp.py: one row per run and GPU count;
- the host cost of each update path from reprise-update-bench: one row per model and path;
- GPT-2 (reprise-bench --model gpt2, torch_gpt2.py, llmc_gpt2.sh): besides the step-time table,
  one table of ms per step, tokens per second and MFU, all computed here from each step time by
  gpt2_flops.py (one formula for every framework); and gpt2_torch_check.py's PASS/FAIL verdicts.
Any other JSON is refused with a line on stderr naming the file, and the rest are still tabled.
Exit status: 0 ok, 1 a file unreadable or refused, or no results at all, 2 --plot without
matplotlib. Requirements: tools/bench/requirements.txt (matplotlib only for --plot).
"""
import argparse
import json
import os
import sys


def gpu_of(data):
    gpu = data.get("gpu")
    return gpu.replace("NVIDIA ", "") if isinstance(gpu, str) and gpu else "GPU not recorded"


def precision(c):
    """bf16 or fp16 before TF32: a 16-bit run may also allow TF32 in what stays float32."""
    if c.get("bf16") or c.get("precision") == "bf16" or c.get("dtype") in ("bf16", "bfloat16"):
        return " bf16"
    if c.get("fp16") or c.get("precision") == "fp16":
        return " fp16"
    if c.get("tf32") or c.get("precision") == "tf32":
        return " TF32"
    return " f32"


def workload(c):
    """The row a step result belongs to, named from its configuration: an ensemble of MLPs
    (reprise records model "ensemble" and the count in "ensemble"; the peers record "models"), a
    ResNet (reprise records model "resnet"; torch_resnet.py records image_size and the torchvision
    version as its model), or an MLP (torch_mlp.py and jax_mlp.py record no model)."""
    if c.get("model") == "gpt2":
        return (f"GPT-2 {c.get('layers', 12)}L×{c.get('width', 768)} ({c.get('heads', 12)} heads, "
                f"vocab {c.get('vocab', 50257)}), B={c.get('batch')} T={c.get('seq', 1024)}"
                + precision(c))
    models = c.get("ensemble") if c.get("model") == "ensemble" else c.get("models")
    if c.get("model") == "ensemble" or models is not None:
        return (f"Ensemble of {models} MLPs {c.get('input_features')}-"
                + "-".join([str(c.get("width"))] * int(c.get("depth") or 0))
                + f"-{c.get('classes')}, batch {c.get('batch')} each" + precision(c))
    if c.get("model") == "mlp" or (c.get("model") is None and "image_size" not in c):
        return f"MLP {c.get('depth')}×{c.get('width')}, batch {c.get('batch')}" + precision(c)
    if c.get("model") == "resnet" or "image_size" in c:  # torch_resnet.py: "torchvision X.Y"
        layout = str(c.get("layout", "nchw")).upper()
        return (f"ResNet-{c.get('depth')} {c.get('image_size')}² {layout}, batch {c.get('batch')}"
                + precision(c))
    return None


class Report:
    def __init__(self):
        self.steps, self.columns, self.files = {}, [], {}
        self.scaling, self.updates, self.headline = [], [], None
        self.gpt2, self.checks = [], []
        self.refused = 0

    def refuse(self, path, why):
        print(f"report: {path}: {why}", file=sys.stderr)
        self.refused += 1

    def add(self, path):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            if path.endswith(".jsonl"):
                return self.refuse(path, "JSON Lines (one record per line), not a file this tool "
                                   "reads: read it as it is")
            return self.refuse(path, f"cannot read it: {e}")
        name = os.path.basename(path)
        if not isinstance(data, dict):
            return self.refuse(path, "not a JSON object, so not a result this tool writes")
        if isinstance(data.get("rows"), list) and isinstance(data.get("columns"), dict):
            self.headline = data  # docs/results/headline.json: plot_headline.py's table.
            return None
        if data.get("tool") == "reprise-update-bench" and isinstance(data.get("models"), list):
            return self.add_updates(path, name, data)
        if isinstance(data.get("runs"), list) and ("single_ms" in data or "args" in data):
            return self.add_scaling(path, name, data)
        if isinstance(data.get("results"), dict) and isinstance(data.get("config"), dict):
            return self.add_steps(path, name, data)
        if isinstance(data.get("error"), str) and isinstance(data.get("config"), dict):
            # A run that could not start (no GPU, no torch): its row says why.
            return self.add_steps(path, name,
                                  {**data, "results": {"run": {"error": data["error"]}}})
        if data.get("tool") == "gpt2_torch_check.py" and isinstance(data.get("records"), list):
            return self.add_check(name, data)
        return self.refuse(path, "neither step times, data-parallel scaling nor update paths "
                           f"(top-level keys: {', '.join(sorted(data)) or 'none'})")

    def add_steps(self, path, name, data):
        key = workload(data["config"])
        if key is None:
            return self.refuse(path, f"unknown model {data['config'].get('model')!r}")
        key += f" — {gpu_of(data)}"
        framework = data.get("framework") or (
            "reprise" if data.get("tool") == "reprise-bench" else data.get("tool", "?"))
        row = self.steps.setdefault(key, {})
        variant = " unbatched" if data["config"].get("batch_ensembles") is False else ""
        if data["config"].get("mirror") not in (None, "off"):
            variant += f" mirror {data['config']['mirror']}"
        for mode, r in data["results"].items():
            column = f"{framework} {mode}{variant}"
            value = r.get("median_ms") if isinstance(r, dict) else None
            if value is None:
                value = r.get("error", "?") if isinstance(r, dict) else str(r)
            if column in row:  # The same workload measured again: a row of its own.
                key = f"{key} ({name})"
                row = self.steps.setdefault(key, {})
            if column not in self.columns:
                self.columns.append(column)
            row[column] = value
            if data["config"].get("model") == "gpt2":
                self.gpt2.append([key, column, value, data["config"], data.get("gpu"), name])
            self.files.setdefault(key, [])
            if name not in self.files[key]:
                self.files[key].append(name)

    def add_check(self, name, data):
        for r in data["records"]:
            ours = r.get("ours", "reprise")
            label = f"{r.get('precision')} ({ours})" if ours != "reprise" else r.get("precision")
            if "error" in r:
                self.checks.append([label, "setup", r["error"], None, False, name])
                continue
            losses = r.get("losses") or []
            worst = max((abs(o - t) / max(abs(t), 1e-30) for o, t in losses), default=None)
            tol = r.get("tolerance")
            self.checks.append([label, "loss, worst step", worst, tol,
                                worst is not None and tol is not None and worst <= tol, name])
            p = r.get("params_rel")
            self.checks.append([label, "parameters, all", p, tol,
                                p is not None and tol is not None and p <= tol, name])

    def add_scaling(self, path, name, data):
        if "args" in data:  # torch_ddp.py
            a = data["args"]
            label = (f"torch DDP, {a.get('model')}-{a.get('depth')} b{a.get('batch')}/GPU"
                     + precision(a))
        else:  # reprise-dp-bench records no precision: the file name tells it.
            label = (f"reprise, {data.get('config')} b{data.get('batch_per_gpu')}/GPU, "
                     f"{data.get('launcher', '?')} launcher")
        for r in data["runs"]:
            if not isinstance(r, dict):
                return self.refuse(path, "a run that is not a JSON object")
            mode = f" {r['mode']}" if "mode" in r else ""
            ms = r.get("step_ms", r.get("median_ms"))
            self.scaling.append([label + mode, r.get("gpus"), ms, r.get("images_per_s"),
                                 r.get("efficiency"), r.get("exposed_comm_ms"), name])

    def add_updates(self, path, name, data):
        for m in data["models"]:
            for p, r in (m.get("paths") or {}).items():
                median = lambda k: (r.get(k) or {}).get("median") if isinstance(r, dict) else None
                self.updates.append([m.get("spec", "?"), p, median("update_us"),
                                     median("step_us"), median("total_us"), gpu_of(data), name])


def cell(v, digits=3):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def tables(rep):
    out = []
    if rep.headline:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import plot_headline
        errors = plot_headline.check(rep.headline)
        for e in errors:
            print(f"report: headline: {e}", file=sys.stderr)
        rep.refused += len(errors)
        if not errors:
            out.append("Headline (docs/results/headline.json):\n\n"
                       + plot_headline.markdown(rep.headline)[0])
    if rep.steps:
        out.append("ms per training step (median):\n\n" + markdown(
            ["workload — GPU"] + rep.columns + ["files"],
            [[k] + [cell(rep.steps[k].get(c)) for c in rep.columns] + [", ".join(rep.files[k])]
             for k in sorted(rep.steps)]))
    if rep.gpt2:
        out.append(gpt2_table(rep.gpt2))
    if rep.checks:
        value = lambda v: v if isinstance(v, str) else "" if v is None else f"{v:.2e}"
        out.append("GPT-2 against PyTorch (gpt2_torch_check.py; relative differences):\n\n"
                   + markdown(["precision", "check", "value", "tolerance", "result", "file"],
                              [[str(c[0]), c[1], value(c[2]),
                                "" if c[3] is None else f"{c[3]:g}", "PASS" if c[4] else "FAIL",
                                c[5]] for c in rep.checks]))
    if rep.scaling:
        out.append("Data-parallel scaling (efficiency against the same framework's 1-GPU step):"
                   "\n\n" + markdown(
                       ["run", "GPUs", "ms per step", "images/s", "efficiency",
                        "exposed communication ms", "file"],
                       [[r[0], cell(r[1]), cell(r[2], 2), cell(r[3], 0),
                         "" if r[4] is None else f"{100 * r[4]:.1f}%", cell(r[5], 2), r[6]]
                        for r in rep.scaling]))
    if rep.updates:
        out.append("Host µs per change between replays (median):\n\n" + markdown(
            ["model", "path", "update µs", "Step() µs", "total µs", "GPU", "file"],
            [[r[0], r[1], cell(r[2], 2), cell(r[3], 2), cell(r[4], 2), r[5], r[6]]
             for r in rep.updates]))
    return "\n\n".join(out)


def gpt2_table(rows):
    """GPT-2 rows: ms, tokens/s and MFU per (workload, framework mode), fastest first."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt2_flops
    body = []
    for key, column, value, config, gpu, name in sorted(
            rows, key=lambda r: (r[0], r[2] if isinstance(r[2], (int, float)) else float("inf"))):
        if isinstance(value, (int, float)):
            tps, mfu = gpt2_flops.from_config(config, value, gpu)
            body.append([key, column, cell(value), f"{tps:,.0f}",
                         "" if mfu is None else f"{100 * mfu:.1f}%", name])
        else:
            body.append([key, column, str(value), "", "", name])
    return ("GPT-2 training step (MFU: " + gpt2_flops.FORMULA + ", over the GPU's dense bf16 "
            "peak):\n\n" + markdown(["workload — GPU", "framework mode", "ms per step",
                                      "tokens/s", "MFU", "file"], body))


def plot(rows, columns, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: --plot needs matplotlib (pip install -r tools/bench/requirements.txt)",
              file=sys.stderr)
        return 2
    keys = sorted(rows)
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(columns)), 4 + 0.2 * len(keys)))
    width = 0.8 / max(1, len(keys))
    for i, key in enumerate(keys):
        values = [rows[key].get(c) if isinstance(rows[key].get(c), (int, float)) else 0
                  for c in columns]
        ax.bar([x + i * width for x in range(len(columns))], values, width, label=key)
    ax.set_xticks([x + width * (len(keys) - 1) / 2 for x in range(len(columns))])
    ax.set_xticklabels(columns, rotation=30, ha="right")
    ax.set_ylabel("ms per training step")
    ax.set_yscale("log")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--plot", help="write a PNG bar chart of the step times here")
    a = p.parse_args()
    rep = Report()
    for path in a.files:
        rep.add(path)
    text = tables(rep)
    if not text:
        print("report: no results in the given files", file=sys.stderr)
        return 1
    print(text)
    status = 1 if rep.refused else 0
    if a.plot:
        if not rep.steps:
            print("report: --plot: no step times to draw", file=sys.stderr)
            return 1
        status = plot(rep.steps, rep.columns, a.plot) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
