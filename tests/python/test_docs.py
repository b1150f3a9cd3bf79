"""The README and docs/benchmarks.md say what the code and the results say: the README's first
commands, its C++ tutorial compiling against the public headers, its Python valid, and both
tables equal to what tools/bench/plot_headline.py makes of docs/results/headline.json."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADLINE = os.path.join(ROOT, "tools", "bench", "plot_headline.py")


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def block(text, language):
    match = re.search(rf"```{re.escape(language)}\n(.*?)```\n", text, re.S)
    assert match, f"no ```{language} block"
    return match.group(1)


def test_readme_starts_with_the_two_commands():
    commands = [line.strip() for line in read("README.md").splitlines() if line.startswith("    ")]
    assert commands[:2] == [
        "cmake -S . -B build -G Ninja && cmake --build build --target train_mlp && ./build/train_mlp",
        "cmake -S . -B build -G Ninja && cmake --build build && "
        "ctest --test-dir build --output-on-failure",
    ]


def test_readme_has_no_session_numbers():
    for path in ("README.md", os.path.join("docs", "benchmarks.md"),
                 os.path.join("docs", "benchmarks_gpt2.md"),
                 os.path.join("docs", "benchmarks_resnet.md"),
                 os.path.join("docs", "engine.md"), os.path.join("docs", "models.md")):
        assert not re.search(r"session [0-9]+", read(path), re.I), path


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to compile the tutorial")
def test_readme_tutorial_compiles_against_the_public_headers(tmp_path):
    probe = tmp_path / "absl_probe.cc"
    probe.write_text('#include "absl/status/status.h"\n')
    if subprocess.run(["g++", "-std=c++20", "-fsyntax-only", str(probe)],
                      capture_output=True, timeout=60).returncode != 0:
        pytest.skip("Abseil's headers are not installed (the public headers include them)")
    source = tmp_path / "tutorial.cc"
    source.write_text(block(read("README.md"), "c++"))
    r = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", "-Wall", "-Werror",
                        "-I" + os.path.join(ROOT, "include"), str(source)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_readme_python_is_valid():
    compile(block(read("README.md"), "python"), "README.md", "exec")


def test_readme_table_is_the_headline_brief():
    r = subprocess.run([sys.executable, HEADLINE, "--brief"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in read("README.md")


def test_benchmarks_table_is_the_headline_table():
    r = subprocess.run([sys.executable, HEADLINE, "--markdown"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    table = r.stdout.split("\n\nNotes:")[0]
    assert table in read("docs", "benchmarks.md")
