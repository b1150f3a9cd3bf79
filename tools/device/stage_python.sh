#!/usr/bin/env bash
# Builds the Python module for the GPU host's Python (3.12, /opt/torch/.venv there) on the
# development machine and stages it beside the tools, with pytest, so that the Python tests run
# on the GPU host too:
#   bash tools/device/stage_python.sh [PYTHON]       # PYTHON: a python3.12 here (pyenv's default)
# then on the GPU host, after `source .stage/env.sh`:
#   PYTHONPATH=$PWD/.stage/python:$PWD/.stage/pylib REPRISE_PYTHON_PATH=$PWD/.stage/python \
#     python3 -m pytest -q -rs tests/python
# Its build folder is build-py312 (the library built again for that Python's module; ccache makes
# it quick after the main build). The module's non-CUDA libraries go to .stage/lib, as
# ../shared/device/stage.sh stages the tools'.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${1:-$HOME/.pyenv/versions/3.12.1/bin/python3}
[[ -x $python ]] || { echo "stage_python.sh: no Python at $python" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-py312 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DREPRISE_STATIC_DEPS=ON -DREPRISE_PYTHON=ON -DPython_EXECUTABLE="$python" \
  -Dnanobind_DIR="$(python3 -m nanobind --cmake_dir)" "${launcher[@]}" >/dev/null
cmake --build build-py312 --target _reprise
module=$(ls build-py312/python/reprise/_reprise.*.so)
bash ../shared/device/stage.sh .stage "$module" >/dev/null
mkdir -p .stage/python/reprise .stage/pylib
mv .stage/bin/"$(basename "$module")" .stage/python/reprise/
cp build-py312/python/reprise/*.py .stage/python/reprise/
# pytest and what it needs, pure Python: unpacked wheels.
wheels=$(mktemp -d)
python3 -m pip download -q --no-deps -d "$wheels" pytest pluggy iniconfig packaging pygments
for w in "$wheels"/*.whl; do python3 -m zipfile -e "$w" .stage/pylib; done
rm -rf "$wheels"
du -sh .stage | awk '{print "staged the module and pytest; .stage is " $1 " (at most 64 MiB travel)"}'
