"""tools/bench/report.py over every committed result, and plot_headline.py's check of the headline
numbers against the raw files they cite."""
import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(ROOT, "tools", "bench", "report.py")
HEADLINE = os.path.join(ROOT, "tools", "bench", "plot_headline.py")
RESULTS = sorted(glob.glob(os.path.join(ROOT, "docs", "results", "*.json")))


def run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_there_are_results():
    assert len(RESULTS) > 10


@pytest.mark.parametrize("path", RESULTS, ids=os.path.basename)
def test_each_result_is_tabled_or_refused_by_name(path):
    r = run(REPORT, path)
    assert "Traceback" not in r.stderr, r.stderr
    if r.returncode == 0:
        assert r.stdout.startswith(("ms per training step", "Data-parallel", "Host µs", "Headline"))
    else:
        assert r.returncode == 1, r.stderr
        assert f"report: {path}:" in r.stderr


def test_the_docstring_example_tables_every_committed_result():
    r = run(REPORT, *RESULTS)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    for table in ("Headline", "ms per training step", "Data-parallel scaling", "Host µs"):
        assert table in r.stdout


def test_ensembles_are_labelled_as_ensembles():
    r = run(REPORT, *[p for p in RESULTS if "ensemble" in os.path.basename(p)])
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if l.startswith("| Ensemble of")]
    assert rows, r.stdout
    assert "ResNet" not in r.stdout


def test_a_file_it_does_not_read_is_refused_by_name(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    r = run(REPORT, str(other), str(broken), RESULTS[0])
    assert r.returncode == 1
    assert f"report: {other}: neither step times" in r.stderr
    assert f"report: {broken}: cannot read it" in r.stderr
    assert "Traceback" not in r.stderr


def test_headline_numbers_are_in_the_files_they_cite():
    r = run(HEADLINE, "--check")
    assert r.returncode == 0, r.stderr


def test_a_headline_number_missing_from_its_file_is_named(tmp_path):
    with open(os.path.join(ROOT, "docs", "results", "headline.json")) as f:
        doc = json.load(f)
    doc["rows"][0]["values"]["reprise"]["value"] *= 0.5
    bad = tmp_path / "headline.json"
    bad.write_text(json.dumps(doc))
    r = run(HEADLINE, "--check", "--data", str(bad))
    assert r.returncode == 1
    assert doc["rows"][0]["workload"] in r.stderr
    assert doc["rows"][0]["values"]["reprise"]["source"] in r.stderr


def test_headline_markdown_names_gpu_date_and_commit_of_every_row():
    r = run(HEADLINE, "--markdown")
    assert r.returncode == 0, r.stderr
    with open(os.path.join(ROOT, "docs", "results", "headline.json")) as f:
        doc = json.load(f)
    for i, row in enumerate(doc["rows"], 1):
        line = next(l for l in r.stdout.splitlines() if l.startswith(f"| {i} | "))
        for field in ("gpu", "date", "commit"):
            assert f"| {row[field]} |" in line
