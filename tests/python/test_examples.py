"""examples/train_gpt2.py, run as a user runs it: its checks of the data and the command line
need no GPU; the training run skips with the reason where no GPU is visible."""

import os
import subprocess
import sys

import numpy as np

import reprise
from reprise import data


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples", "train_gpt2.py")


def run_example(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True,
                          env=env, timeout=600)


def tiny_corpus(tmp_path):
    """Byte-level tokens (vocabulary 257), as tools/data/build_shards.py's byte tokenizer gives."""
    rng = np.random.default_rng(0)
    data.write_token_shard(str(tmp_path / "tiny_train_000.bin"), rng.integers(0, 257, 20000))
    data.write_token_shard(str(tmp_path / "tiny_val_000.bin"), rng.integers(0, 257, 3000))
    return str(tmp_path)


def test_the_example_checks_its_data_before_the_gpu(tmp_path):
    missing = run_example("--data_dir", str(tmp_path / "none"))
    assert missing.returncode != 0 and "is not a directory" in missing.stderr
    empty = run_example("--data_dir", str(tmp_path))
    assert empty.returncode != 0 and "holds no *_train_*.bin shard" in empty.stderr
    corpus = tiny_corpus(tmp_path)
    too_long = run_example("--data_dir", corpus, "--vocab", "257", "--batch", "64", "--seq", "256")
    assert too_long.returncode != 0 and too_long.stderr.startswith("train_gpt2.py: ")
    assert "fewer than one batch of 64" in too_long.stderr
    bad = run_example("--data_dir", corpus, "--prompt", "1,x")
    assert bad.returncode != 0 and "not a comma-separated list of token ids" in bad.stderr
    if reprise.no_gpu_reason():
        plain = run_example("--data_dir", corpus, "--vocab", "257", "--small", "--batch", "4")
        assert plain.returncode != 0 and "no CUDA device visible" in plain.stderr


def test_the_example_trains_evaluates_and_generates(gpu, tmp_path):
    corpus = tiny_corpus(tmp_path)
    run = run_example("--data_dir", corpus, "--vocab", "257", "--small", "--batch", "4",
                      "--seq", "64", "--steps", "30", "--print_every", "10", "--eval_every", "15",
                      "--eval_batches", "2", "--checkpoint", str(tmp_path / "gpt2.ckpt"),
                      "--samples", "2", "--generate_tokens", "8", "--prompt", "1,2,3")
    assert run.returncode == 0, run.stderr
    assert "step    30/30  loss" in run.stdout and "validation loss" in run.stdout
    samples = [line for line in run.stdout.splitlines() if line.startswith("sample ")]
    assert len(samples) == 2 and all(len(s.split("|")[1].split()) == 8 for s in samples)
    assert os.path.getsize(tmp_path / "gpt2.ckpt") > 0
