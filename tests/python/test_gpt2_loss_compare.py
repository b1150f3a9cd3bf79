"""The loss comparison with PyTorch (tools/bench/torch_gpt2_train.py, gpt2_loss_compare.py): the
batch order written again in Python against the values the C++ loader pins, the comparison's
verdicts and refusals, and (where torch is installed) a tiny run repeated on the CPU, its batches
checked against a batch log."""
import importlib.util
import json
import math
import os
import struct
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "tools", "bench")
sys.path.insert(0, BENCH)

import torch_gpt2_train  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
CONFIG = {"layers": 1, "heads": 2, "width": 32, "vocab": 257, "max_positions": 16,
          "logits_width": 384, "batch": 2, "seq": 16, "steps": 4, "dtype": "f32",
          "allow_tf32": 0, "optimizer": "adamw", "lr": "0.00300000003", "beta1": "0.899999976",
          "beta2": "0.949999988", "eps": "9.99999994e-09", "weight_decay": "0.100000001",
          "decay_rank1": 0, "max_grad_norm": 1, "warmup": 1, "decay": "cosine",
          "total_steps": 4, "min_lr_factor": "0.100000001", "seed": 1337, "eval_every": 2,
          "eval_batches": 2}


def run(*args, timeout=300):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def write_log(path, config, train, val):
    torch_gpt2_train.write_loss_log(str(path), config, train, val)


def test_self_test_pins_the_cpp_loaders_order():
    r = run(os.path.join(BENCH, "torch_gpt2_train.py"), "--self-test")
    assert r.returncode == 0, r.stderr
    assert "self-test PASS" in r.stdout


def test_compare_judges_the_final_losses(tmp_path):
    config = dict(CONFIG, steps=30, total_steps=30, eval_every=10, train_shards="t", val_shards="v")
    train = {s: 10 - 0.2 * s for s in range(1, 31)}
    val = {s: 9 - 0.1 * s for s in (10, 20, 30)}
    write_log(tmp_path / "torch.log", dict(config, framework="torch"), train, val)
    compare = os.path.join(BENCH, "gpt2_loss_compare.py")

    def verdict(ours_train, ours_val, ours_config=config):
        write_log(tmp_path / "ours.log", ours_config, ours_train, ours_val)
        return run(compare, str(tmp_path / "ours.log"), str(tmp_path / "torch.log"))

    close = verdict({s: v * 1.01 for s, v in train.items()}, val)
    assert close.returncode == 0, close.stdout + close.stderr
    assert "gpt2_loss_compare: PASS (3 of 3 checks)" in close.stdout
    far = verdict({s: v * 1.05 for s, v in train.items()}, val)
    assert far.returncode == 1
    assert "final train loss (mean of last 10)" in far.stdout and "FAIL" in far.stdout
    far_val = verdict(train, {s: v * 0.95 for s, v in val.items()})
    assert far_val.returncode == 1
    flat = {s: 10.0 for s in train}
    write_log(tmp_path / "torch.log", config, flat, val)
    assert verdict(flat, val).returncode == 1  # Equal, but nothing was learned.
    write_log(tmp_path / "torch.log", config, train, val)
    missing = verdict({s: v for s, v in train.items() if s != 7}, val)
    assert missing.returncode == 2 and "29 steps" in missing.stderr
    other = verdict(train, val, dict(config, seq=32))
    assert other.returncode == 2 and "seq: 32 against 16" in other.stderr


def shard(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, len(tokens)) + bytes(1012))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_a_tiny_run_is_repeated_on_the_cpu_with_its_batches_checked(tmp_path):
    import torch
    import torch_gpt2
    data = tmp_path / "data"
    data.mkdir()
    shard(data / "tiny_train_000000.bin", [(7 * i) % 257 for i in range(200)])
    shard(data / "tiny_val_000000.bin", [(5 * i) % 257 for i in range(80)])
    config = dict(CONFIG, train_shards=str(data / "tiny_train_000000.bin"),
                  val_shards=str(data / "tiny_val_000000.bin"))
    write_log(tmp_path / "reprise.log", config, {}, {})
    # The initial weights, as train_gpt2 --save_initial writes them (no lm_head: it is wte).
    model = torch_gpt2.build_gpt2(1, 2, 32, 257, 16, seed=3)
    tensors = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    (tmp_path / "init.safetensors").write_bytes(struct.pack("<Q", len(text)) + text +
                                                b"".join(blobs))
    windows = torch_gpt2_train.Windows([str(data / "tiny_train_000000.bin")], 16, 257)
    cache, rows = {}, []
    for k in range(4):
        rows += torch_gpt2_train.train_batch(windows, k, 2, 1337, cache)
    log = b"".join(struct.pack(f"<{len(r)}H", *r) for r in rows)
    (tmp_path / "batches.bin").write_bytes(log)
    args = [os.path.join(BENCH, "torch_gpt2_train.py"), "--reprise-log",
            str(tmp_path / "reprise.log"), "--init", str(tmp_path / "init.safetensors"),
            "--batch-log", str(tmp_path / "batches.bin"), "--data-dir", str(data), "--out",
            str(tmp_path / "torch.log"), "--device", "cpu"]
    r = run(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    got_config, train, val = torch_gpt2_train.read_loss_log(str(tmp_path / "torch.log"))
    assert sorted(train) == [1, 2, 3, 4] and sorted(val) == [2, 4]
    assert got_config["batches_checked"] == "1" and got_config["seq"] == "16"
    assert all(math.isfinite(v) for v in [*train.values(), *val.values()])
    # The first step's loss is the loss of the given weights on the first batch.
    x = torch.tensor([list(r[:-1]) for r in rows[:2]])
    y = torch.tensor([list(r[1:]) for r in rows[:2]])
    with torch.no_grad():
        assert train[1] == pytest.approx(float(model(x, y)), rel=1e-5)
    # A batch that is not what the shards hold at that place is found and named.
    bad = bytearray(log)
    bad[2 * (2 * 17) + 6] ^= 1  # Step 2, sequence 0, token 3.
    (tmp_path / "batches.bin").write_bytes(bytes(bad))
    r = run(*args)
    assert r.returncode == 2
    assert "step 2, sequence 0" in r.stderr and "token 3" in r.stderr
