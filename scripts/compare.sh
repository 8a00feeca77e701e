#!/usr/bin/env bash
# Compare this checkout's offline plan with another commit's: bash scripts/compare.sh [BASE] [STACK]
# (--help for the details). The pull request's plan diff (.github/workflows/preview.yml), on your machine.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bash scripts/compare.sh [--out DIR] [BASE] [STACK]

Plan STACK (default: dev) on BASE (default: origin/main, else main) and on this checkout, and
print `python -m infra diff` of the two: markdown, what `pulumi up` would replace, update, add and
remove, and the change in hourly cost (docs/previews.md, "Review a change").

BASE is checked out in a temporary git worktree that shares this checkout's .venv and .tools
(set them up first: bash scripts/plan.sh); the worktree is removed again when the command ends,
also when a plan fails or on Ctrl-C. Nothing is fetched: run `git fetch origin main` first for an
up-to-date origin/main. A stack file only this checkout has is compared as new (--base-absent); a
plan that fails is shown as failed in the comparison instead of stopping it.

options:
  --out DIR   keep both plan folders (DIR/base, DIR/head) and their logs, instead of a temporary folder
  -h, --help  show this help and exit

exit status: 0 when both were planned and compared (whatever the difference), 1 when a plan failed,
2 on bad arguments or a BASE git does not know.
EOF
}

out=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --out) [ $# -ge 2 ] || { echo "compare.sh: --out needs a folder" >&2; exit 2; }; out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    -*) echo "compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[ ${#args[@]} -le 2 ] || { echo "compare.sh: at most BASE and STACK, got: ${args[*]} (see --help)" >&2; exit 2; }

[ -z "$out" ] || out=$(realpath -m "$out")
cd "$(dirname "$0")/.."
root=$PWD
if [ ${#args[@]} -ge 1 ]; then
  base=${args[0]}
elif git rev-parse --verify --quiet origin/main^{commit} >/dev/null; then
  base=origin/main
else
  base=main
fi
stack=${args[1]:-dev}
commit=$(git rev-parse --verify --quiet "$base^{commit}") || {
  echo "compare.sh: git does not know BASE '$base' (a branch, tag or commit; git fetch first?)" >&2
  exit 2
}
[ -f "Pulumi.$stack.yaml" ] || { echo "compare.sh: no stack file Pulumi.$stack.yaml in this checkout" >&2; exit 2; }
[ -x .venv/bin/python ] && [ -d .tools ] || { echo "compare.sh: set up first: bash scripts/plan.sh" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-training-compare.XXXXXX")
worktree="$tmp/base"
plans=${out:-$tmp/plans}
# The base's plan keeps its Helm renders with this checkout's (.cache: keyed by everything a render reads).
cleanup() {
  # --force: the worktree holds the links to .venv and .tools and the base plan's .cache, all untracked.
  if ! git -C "$root" worktree remove --force "$worktree" >/dev/null 2>&1; then
    rm -rf "$worktree"
    git -C "$root" worktree prune   # drops the entry of the folder just removed (others' folders exist)
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "compare: $stack on $base (${commit:0:12}) and on this checkout" >&2
git worktree add --quiet --detach "$worktree" "$commit"
ln -s "$root/.venv" "$root/.tools" "$worktree/"
mkdir -p "$plans"
rm -rf "$plans/base" "$plans/head"

sides=()
status=0
if [ ! -f "$worktree/Pulumi.$stack.yaml" ]; then
  echo "compare: $base has no Pulumi.$stack.yaml: the stack is new" >&2
  sides+=(--base-absent)
elif ! (cd "$worktree" && GPU_TRAINING_PLAN_CACHE=${GPU_TRAINING_PLAN_CACHE-$root/.cache} .venv/bin/python -m infra plan --stack "$stack" --out "$plans/base") >"$plans/base.log" 2>&1; then
  echo "compare: the plan on $base failed (its end below; all of it in $plans/base.log)" >&2
  tail -n 20 "$plans/base.log" >&2
  sides+=(--base-failed)
  status=1
fi
if ! .venv/bin/python -m infra plan --stack "$stack" --out "$plans/head" >"$plans/head.log" 2>&1; then
  echo "compare: the plan of this checkout failed (shown in the comparison)" >&2
  sides+=(--head-failed)
  status=1
fi
.venv/bin/python -m infra diff "$plans/base" "$plans/head" --title "Offline plan: $stack, $base to this checkout" \
  ${sides[@]+"${sides[@]}"} --head-log "$plans/head.log" --base-root "$worktree" --head-root "$root"
exit "$status"
