#!/usr/bin/env bash
# Stages a change kept as a patch beside the build it changes, for tools/device/patch_trial.sh, on
# the development machine, from a clean checkout with a configured build/:
#   bash tools/device/stage_trial.sh PATCH   # HEAD against HEAD + PATCH
#   bash tools/device/stage_trial.sh REV     # REV (a commit before HEAD) against HEAD
# Builds the old tree's reprise_gpu_tests and reprise-bench and stages them in .stage/old, applies
# the change (PATCH, or REV..HEAD), builds again and stages the changed tools in .stage/bin with
# their libraries, then puts the tree back as it was (HEAD, on its branch), leaving build/ the
# change's (ccache makes the rebuild back cheap). Refuses a tree with changes to tracked files, or
# a change that does not apply.
set -euo pipefail
change=${1:?usage: stage_trial.sh PATCH|REV}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
stage_sh=${STAGE_SH:-$here/../../../shared/device/stage.sh}
[[ -f $stage_sh ]] || { echo "no stage.sh at $stage_sh (set STAGE_SH)" >&2; exit 2; }
if ! git diff --quiet HEAD --; then
  echo "the tree has changes to tracked files: commit or stash them first" >&2
  exit 2
fi
back=""  # With REV: where to return (the branch, or HEAD's commit).
if [[ -f $change ]]; then
  patch=$change name=$(basename "$change")
elif git rev-parse --verify --quiet "$change^{commit}" > /dev/null; then
  back=$(git symbolic-ref --short -q HEAD || git rev-parse HEAD)
  patch=$(mktemp) name="$(git rev-parse --short "$change")..$(git rev-parse --short HEAD)"
  git diff --binary "$change" HEAD > "$patch"
  git checkout -q --detach "$change"
  trap 'git checkout -q "$back"' EXIT
else
  echo "$change is neither a patch file nor a commit" >&2
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
old_rev=$(git rev-parse --short HEAD)
git apply "$patch"
trap 'git apply -R "$patch"; [[ -z $back ]] || git checkout -q "$back"' EXIT
ninja -C build "${targets[@]}" > /dev/null
bash "$stage_sh" .stage "${targets[@]/#/build/}"
echo "staged: .stage/old ($old_rev), .stage/bin (with $name)"
