"""The GPT-2 peers' tools (tools/bench/gpt2_flops.py, torch_gpt2.py, gpt2_torch_check.py,
llmc_gpt2.sh, report.py's GPT-2 tables): what runs without a GPU here, the rest where there is
one (skipped, with the reason, elsewhere)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "tools", "bench")
sys.path.insert(0, BENCH)

import gpt2_flops  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def run(*args, timeout=300, env=None):
    return subprocess.run([*args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env=env)


def test_gpt2_124m_counts_as_issue_40_says():
    n = gpt2_flops.num_parameters(12, 768, 50257, 1024)
    assert n == 124_439_808
    assert gpt2_flops.flops_per_token(n, 12, 768, 1024) == 6 * n + 6 * 12 * 768 * 1024
    tps, mfu = gpt2_flops.from_config({"batch": 16, "seq": 1024}, 32.7, "NVIDIA H200")
    assert tps == pytest.approx(16 * 1024 / 0.0327)
    assert mfu == pytest.approx(gpt2_flops.flops_per_token(n, 12, 768, 1024) * tps / 989.4e12)
    assert gpt2_flops.from_config({"batch": 1}, 1.0, "some other GPU")[1] is None
    assert gpt2_flops.peak_tflops("some other GPU", 100) == 100


def test_report_tables_gpt2_tokens_mfu_and_the_check(tmp_path):
    cfg = {"model": "gpt2", "batch": 4, "seq": 256, "layers": 12, "heads": 12, "width": 768,
           "vocab": 50257, "precision": "bf16"}
    files = {
        "torch.json": {"framework": "torch", "gpu": "NVIDIA H200", "config": cfg,
                       "results": {"eager": {"median_ms": 20.0}, "compile": {"error": "boom"}}},
        "llmc.json": {"framework": "llm.c", "gpu": "NVIDIA H200", "config": cfg,
                      "results": {"cudnn": {"median_ms": 5.0}}},
        "norun.json": {"framework": "torch", "error": "no CUDA GPU visible", "config": cfg},
        "check.json": {"tool": "gpt2_torch_check.py", "passed": False, "records": [
            {"precision": "fp32", "tolerance": 1e-4, "losses": [[6.0, 6.0001]], "params_rel": 0.0},
            {"precision": "bf16", "tolerance": 2e-2, "error": "ValueError: no build_gpt2"}]},
    }
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    r = run(sys.executable, os.path.join(BENCH, "report.py"), *sorted(str(tmp_path / f)
                                                                      for f in files))
    assert r.returncode == 0, r.stderr
    assert "GPT-2 12L×768 (12 heads, vocab 50257), B=4 T=256 bf16 — H200" in r.stdout
    tokens = f"{4 * 256 / 0.005:,.0f}"
    assert f"| llm.c cudnn | 5.000 | {tokens} |" in r.stdout
    assert "| torch compile | boom |" in r.stdout
    assert "no CUDA GPU visible" in r.stdout
    assert "| fp32 | loss, worst step | 1.67e-05 | 0.0001 | PASS |" in r.stdout
    assert "| bf16 | setup | ValueError: no build_gpt2 |  | FAIL |" in r.stdout


def test_torch_gpt2_refuses_bad_arguments_by_name():
    script = os.path.join(BENCH, "torch_gpt2.py")
    r = run(sys.executable, script, "--modes", "eager,fast")
    assert r.returncode == 2 and "--modes: unknown ['fast']" in r.stderr
    r = run(sys.executable, script, "--seq", "2048")
    assert r.returncode == 2 and "--seq 2048 is longer than --positions 1024" in r.stderr
    r = run(sys.executable, script, "--width", "100", "--heads", "12")
    assert r.returncode == 2 and "--width 100 is not a multiple of --heads 12" in r.stderr


def test_llmc_script_says_what_it_needs(tmp_path):
    script = os.path.join(BENCH, "llmc_gpt2.sh")
    r = run("bash", script)
    assert r.returncode == 2 and "usage" in r.stderr
    env = {**os.environ, "LLMC_DIR": str(tmp_path / "nothing"), "OUT": str(tmp_path)}
    r = run("bash", script, "build", env=env)
    assert r.returncode == 1 and "no llm.c source" in r.stderr
    r = run("bash", script, "run", "4", "256", env=env)
    assert r.returncode == 1 and "is not built" in r.stderr


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_check_script_passes_torch_against_itself():
    r = run(sys.executable, os.path.join(BENCH, "gpt2_torch_check.py"), "--self-test",
            "--precision", "fp32", "--steps", "2", "--layers", "1", "--width", "32",
            "--heads", "2", "--vocab", "64", "--seq", "16", "--batch", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gpt2_torch_check: PASS" in r.stdout


def test_check_against_reprise_on_the_gpu(gpu):
    import reprise
    if not HAVE_TORCH:
        pytest.skip("torch is not installed")
    if not hasattr(reprise.models, "build_gpt2"):
        pytest.skip("this reprise module has no models.build_gpt2")
    env = {**os.environ, "REPRISE_PYTHON_PATH": os.path.dirname(os.path.dirname(
        reprise.__file__))}
    r = run(sys.executable, os.path.join(BENCH, "gpt2_torch_check.py"), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
