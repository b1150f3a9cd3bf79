#!/usr/bin/env bash
# Stages a change kept as a patch beside the build it changes, for tools/device/patch_trial.sh, on
# the development machine, from a clean checkout with a configured build/:
#   bash tools/device/stage_trial.sh PATCH
# Builds HEAD's reprise_gpu_tests and reprise-bench and stages them in .stage/old, applies PATCH,
# builds again and stages the changed tools in .stage/bin with their libraries,
# then takes PATCH off again, so the tree is HEAD's and build/ the change's (ccache makes the
# rebuild back cheap). Refuses a tree with changes to tracked files, or a PATCH that does not apply.
set -euo pipefail
patch=${1:?usage: stage_trial.sh PATCH}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
stage_sh=${STAGE_SH:-$here/../../../shared/device/stage.sh}
[[ -f $patch ]] || { echo "no patch at $patch" >&2; exit 2; }
[[ -f $stage_sh ]] || { echo "no stage.sh at $stage_sh (set STAGE_SH)" >&2; exit 2; }
if ! git diff --quiet HEAD --; then
  echo "the tree has changes to tracked files: commit or stash them first" >&2
  exit 2
fi
git apply --check "$patch"
# Only what patch_trial.sh runs: with reprise-dump the two builds and the tree passed the 64 MiB a
# device call carries.
targets=(reprise_gpu_tests reprise-bench)
ninja -C build "${targets[@]}" > /dev/null
rm -rf .stage
bash "$stage_sh" .stage build/reprise_gpu_tests build/reprise-bench > /dev/null
mv .stage/bin .stage/old
rm -f .stage/env.sh  # stage.sh copies it again (read-only)
git apply "$patch"
trap 'git apply -R "$patch"' EXIT
ninja -C build "${targets[@]}" > /dev/null
bash "$stage_sh" .stage "${targets[@]/#/build/}"
echo "staged: .stage/old (HEAD $(git rev-parse --short HEAD)), .stage/bin (with $(basename "$patch"))"
