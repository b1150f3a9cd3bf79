#!/usr/bin/env python3
"""Checks docs/results/headline.json against the raw results it cites, prints the headline table as
markdown and draws docs/headline.png (reprise beside PyTorch, JAX and llm.c where measured).

  python3 tools/bench/plot_headline.py                 # check, print the table, redraw the PNG
  python3 tools/bench/plot_headline.py --check         # check only
  python3 tools/bench/plot_headline.py --markdown      # check and print the table only
  python3 tools/bench/plot_headline.py --brief         # check and print the README's short table

Every value of headline.json names its raw file (`source`) and either a string of that file that
holds it (`match`) or, for a JSON file, the key it is stored under (`key`); a value that the file
does not hold, rounded as the table shows it, is an error naming the row, the column and the file.
Exit status: 0 ok, 1 a value not found or a file unreadable, 2 drawing without matplotlib.
"""
import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"


def decimals(row, value):
    """Decimals the table shows: whole images/s, 4 below 1 ms, else 2."""
    if row["unit"] == "img/s":
        return 0
    return 4 if value < 1 else 2


def shown(row, value):
    return f"{value:,.{decimals(row, value)}f}"


def holds(numbers, value, places):
    return any(abs(round(float(n.replace(",", "")), places) - value) < 0.5 * 10**-places
               for n in numbers)


def check(doc):
    """Returns the errors: each value that its source does not hold."""
    errors = []
    for row in doc["rows"]:
        for column, cell in row["values"].items():
            where = f"{row['workload']} ({row['gpu']}), {column}: {cell['source']}"
            try:
                with open(os.path.join(ROOT, cell["source"])) as f:
                    text = f.read()
            except OSError as e:
                errors.append(f"{where}: cannot read it: {e}")
                continue
            places = decimals(row, cell["value"])
            if "key" in cell:
                numbers = re.findall(rf'"{re.escape(cell["key"])}":\s*({NUMBER})', text)
                what = f'"{cell["key"]}"'
            else:
                if cell["match"] not in text:
                    errors.append(f"{where}: does not contain {cell['match']!r}")
                    continue
                numbers = re.findall(NUMBER, cell["match"])
                what = repr(cell["match"])
            if not holds(numbers, cell["value"], places):
                errors.append(f"{where}: no {what} value rounds to {shown(row, cell['value'])}")
    return errors


def best_peer(doc, row):
    """(ratio, column) of the fastest peer, ratio > 1 when reprise is faster; None without peers."""
    peers = {c: v["value"] for c, v in row["values"].items() if c != "reprise"}
    if not peers:
        return None
    reprise = row["values"]["reprise"]["value"]
    if row["unit"] == "img/s":
        column = max(peers, key=peers.get)
        return reprise / peers[column], column
    column = min(peers, key=peers.get)
    return peers[column] / reprise, column


def markdown(doc):
    columns = [c for c in doc["columns"] if c != "reprise"
               and any(c in r["values"] for r in doc["rows"])]
    titles = doc["columns"]
    head = (["#", "workload", "unit", "reprise"] + [titles[c] for c in columns]
            + ["reprise vs best peer", "GPU", "date", "commit"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes, commands = [], []
    for i, row in enumerate(doc["rows"], 1):
        cells = [str(i), row["workload"], row["unit"] + (" (higher is better)" if row["unit"] == "img/s" else ""),
                 "**" + shown(row, row["values"]["reprise"]["value"]) + "**"]
        for c in columns:
            cell = row["values"].get(c)
            if cell is None:
                cells.append("—")
                continue
            text = shown(row, cell["value"])
            if cell.get("date") and cell["date"] != row["date"]:
                text += f" ({cell['date']})"
            cells.append(text)
        best = best_peer(doc, row)
        cells.append(f"{best[0]:.2f}× ({titles[best[1]]})" if best else "no peer measured")
        cells += [row["gpu"], row["date"], row["commit"]]
        lines.append("| " + " | ".join(cells) + " |")
        peer_notes = [f"{titles[c]}: {v['note']}" for c, v in row["values"].items() if v.get("note")]
        if row.get("note"):
            peer_notes.append(row["note"])
        if peer_notes:
            notes.append(f"- Row {i}: " + "; ".join(peer_notes) + ".")
        sources = ", ".join(sorted({f"`{v['source']}`" for v in row["values"].values()}))
        command = f"{i}. `{row['command']}`"
        if row.get("peer_command"):
            command += f"; peers: `{row['peer_command']}`"
        commands.append(command + f". Raw: {sources}.")
    return "\n".join(lines), notes, commands


def brief(doc):
    """The README's table: the rows marked "brief", reprise against its fastest peer."""
    lines = ["| workload | reprise | best peer | reprise vs best peer | GPU | date |",
             "|---|---|---|---|---|---|"]
    for row in doc["rows"]:
        if not row.get("brief"):
            continue
        unit = " img/s" if row["unit"] == "img/s" else " ms"
        best = best_peer(doc, row)
        peer = (f"{shown(row, row['values'][best[1]]['value'])}{unit} ({doc['columns'][best[1]]})"
                if best else "not measured")
        lines.append(f"| {row['workload']} | **{shown(row, row['values']['reprise']['value'])}{unit}**"
                     f" | {peer} | {f'{best[0]:.2f}×' if best else '—'} | {row['gpu']} |"
                     f" {row['date']} |")
    return "\n".join(lines)


def plot(doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_headline: drawing needs matplotlib (pip install -r tools/bench/requirements.txt)",
              file=sys.stderr)
        return 2
    rows = [r for r in doc["rows"] if best_peer(doc, r)]
    # Eager PyTorch (up to 90x slower) would squash the scale: the table has it.
    columns = [c for c in doc["columns"]
               if c not in ("reprise", "torch_eager") and any(c in r["values"] for r in rows)]
    colors = {"torch_graph": "#9e9e9e", "torch_compile_graph": "#1f77b4", "jax": "#2ca02c",
              "llmc": "#9467bd"}
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.6))
    height = 0.8 / len(columns)
    for j, c in enumerate(columns):
        ys, xs = [], []
        for i, row in enumerate(rows):
            cell = row["values"].get(c)
            if cell is None:
                continue
            reprise = row["values"]["reprise"]["value"]
            # Time per step relative to reprise's: a throughput's inverse for img/s rows.
            rel = (reprise / cell["value"]) if row["unit"] == "img/s" else cell["value"] / reprise
            ys.append(i + (j - (len(columns) - 1) / 2) * height)
            xs.append(rel)
        ax.barh(ys, xs, height, label=doc["columns"][c], color=colors.get(c))
        for y, x in zip(ys, xs):
            ax.text(x + 0.02, y, f"{x:.2f}x", va="center", fontsize=6.5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['workload']}\n{r['gpu']}, {r['date']}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color="#d62728", linewidth=1.5, label="reprise (= 1)")
    ax.set_xlim(0, ax.get_xlim()[1] + 0.3)
    ax.set_xlabel("peer's time per step / reprise's (> 1: reprise is faster; img/s rows inverted)",
                  fontsize=8)
    ax.set_title("reprise against its fastest peers, as measured (PyTorch eager: see the table)",
                 fontsize=8.5)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=os.path.join(ROOT, "docs/results/headline.json"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs/headline.png"))
    p.add_argument("--check", action="store_true", help="check the values only")
    p.add_argument("--markdown", action="store_true", help="check and print the table, no PNG")
    p.add_argument("--brief", action="store_true", help="check and print the README's table")
    a = p.parse_args()
    try:
        with open(a.data) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"plot_headline: cannot read {a.data}: {e}", file=sys.stderr)
        return 1
    errors = check(doc)
    for e in errors:
        print(f"plot_headline: {e}", file=sys.stderr)
    if errors:
        return 1
    if a.check:
        print(f"plot_headline: {sum(len(r['values']) for r in doc['rows'])} values checked")
        return 0
    if a.brief:
        print(brief(doc))
        return 0
    table, notes, commands = markdown(doc)
    print(table + "\n\nNotes:\n\n" + "\n".join(notes) + "\n\nCommands:\n\n" + "\n".join(commands))
    return 0 if a.markdown else plot(doc, a.out)


if __name__ == "__main__":
    sys.exit(main())
