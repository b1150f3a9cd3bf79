"""tools/bench/plan_traffic.py: the bytes each kind of launch moves, on a plan written by hand and on
one reprise-dump writes (skipped where it is not built)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))

import plan_traffic  # noqa: E402

DUMP = os.path.join(ROOT, "build", "reprise-dump")


def node(i, op, inputs=(), outputs=()):
    return {"id": i, "name": f"n{i}", "op": op,
            "inputs": [{"node": n, "output": o, "name": f"n{n}"} for n, o in inputs],
            "outputs": list(outputs)}


def spec(dtype, *shape):
    return {"dtype": dtype, "shape": list(shape)}


def test_reads_inputs_once_writes_outputs_and_what_an_in_place_update_reads():
    nodes = [
        node(0, "parameter", outputs=[spec("f32", 4, 8)]),             # 128 bytes
        node(1, "input", outputs=[spec("bf16", 2, 8)]),                # 32 bytes
        node(2, "matmul", [(1, 0), (0, 0), (1, 0)], [spec("bf16", 2, 4)]),  # reads 160, writes 16
        node(3, "state", outputs=[spec("f32", 4, 8)]),                 # 128 bytes
        node(4, "sgd_momentum", [(0, 0), (2, 0), (3, 0)]),             # in place: p and state
    ]
    dump = {"stage": "plan", "nodes": nodes,
            "plan": {"launches": [{"node": 2}, {"node": 4}]}}
    rows = {op: (n, r, w) for op, n, r, w in plan_traffic.traffic(dump)}
    assert rows["matmul"] == (1, 160, 16)
    assert rows["sgd_momentum"] == (1, 128 + 16 + 128, 128 + 128)
    assert [op for op, *_ in plan_traffic.traffic(dump)] == ["sgd_momentum", "matmul"]


def test_kept_parameter_copies_are_written_by_the_update_and_refreshed_only_on_host_writes():
    nodes = [
        node(0, "parameter", outputs=[spec("f32", 4, 8)]),             # 128 bytes
        node(1, "state", outputs=[spec("bf16", 4, 8)]),                # its copy: 64 bytes
        node(2, "state", outputs=[spec("i32")]),                       # the flag: 4 bytes
        node(3, "input", outputs=[spec("f32", 4, 8)]),                 # a gradient: 128 bytes
        node(4, "refresh_copies", [(0, 0), (1, 0), (2, 0)]),
        node(5, "adam_multi", [(0, 0), (3, 0), (1, 0), (2, 0)]),
    ]
    nodes[5]["attrs"] = {"tensors": 1, "copies": 1}
    dump = {"stage": "plan", "nodes": nodes,
            "plan": {"launches": [{"node": 4}, {"node": 5}]}}
    rows = {op: (n, r, w) for op, n, r, w in plan_traffic.traffic(dump)}
    assert rows["refresh_copies"] == (1, 4, 0)  # Its flag only.
    # The copy is written, not read; the weight, the gradient and the flag are read.
    assert rows["adam_multi"] == (1, 128 + 128 + 4, 128 + 64 + 4)


def test_refuses_what_is_not_a_plan_and_an_unknown_dtype(tmp_path):
    with pytest.raises(ValueError, match="not a plan dump"):
        plan_traffic.traffic({"stage": "ir", "nodes": []})
    bad = {"stage": "plan", "nodes": [node(0, "input", outputs=[spec("c64", 2)]),
                                      node(1, "relu", [(0, 0)], [spec("f32", 2)])],
           "plan": {"launches": [{"node": 1}]}}
    with pytest.raises(ValueError, match="unknown dtype"):
        plan_traffic.traffic(bad)
    path = tmp_path / "ir.json"
    path.write_text(json.dumps({"stage": "ir", "nodes": []}))
    assert plan_traffic.main([str(path)]) == 1


def dump_small_gpt2_plan(path, update_copies):
    """A small bf16 GPT-2's plan dumped as JSON to `path`, with the 16-bit copies kept or cast."""
    subprocess.run([DUMP, "--model", "gpt2", "--depth", "2", "--width", "128", "--seq", "64",
                    "--vocab", "512", "--batch", "4", "--dtype", "bf16", "--stage", "plan",
                    f"--update_copies={'true' if update_copies else 'false'}", "--format", "json",
                    "-o", str(path)], check=True, timeout=120)
    return json.loads(path.read_text())


@pytest.mark.skipif(not os.path.exists(DUMP), reason="build/reprise-dump is not built")
def test_a_gpt2_plan_moves_what_its_optimizer_says(tmp_path):
    # The 16-bit copies cast at every step's start (--update_copies=false), then kept (the default).
    out = tmp_path / "plan.json"
    dump = dump_small_gpt2_plan(out, update_copies=False)
    rows = {op: (n, r, w) for op, n, r, w in plan_traffic.traffic(dump)}
    assert sum(n for n, _, _ in rows.values()) == len(dump["plan"]["launches"])
    # AdamW writes each parameter and its two moments (float32): three times the parameters' bytes,
    # and the step counter it reads (two int32) counts as written too.
    assert rows["adam_multi"][2] == 3 * 4 * dump["parameter_count"] + 8
    assert plan_traffic.main([str(out), "--top", "3"]) == 0
    # With the 16-bit copies kept, AdamW also writes every copy and the flag, and the cast at the
    # step's start (which read every weight and wrote every copy) reads just the flag.
    kept_dump = dump_small_gpt2_plan(tmp_path / "kept.json", update_copies=True)
    kept_rows = {op: (n, r, w) for op, n, r, w in plan_traffic.traffic(kept_dump)}
    copies = kept_dump["plan"]["memory"]["bytes_by_class"]["parameter_copy"]
    assert copies == rows["cast_multi"][2]
    assert kept_rows["adam_multi"][2] == rows["adam_multi"][2] + copies + 4
    assert kept_rows["refresh_copies"] == (1, 4, 0)
    assert "cast_multi" not in kept_rows
