#!/usr/bin/env bash
# The GPU check in one command that ends by itself within DEADLINE seconds (default 360: a lent GPU gives 10
# minutes a call and 15 in all; on an H100 every part fitted in 226 s of 400, with the passing grader at 102 s
# alone, more beside the others: 280 would have cut it). From the repository root:
#   bash benchmarks/gpu/run.sh                      # a (bare) GPU machine: install the carried wheels, every part
#   bash benchmarks/gpu/run.sh python -m specdec_helpers selfcheck --dtype bf16   # one command instead (the same
#                                                   # install, deadline, log archive)
#   DEVICE=cpu QUICK=1 bash benchmarks/gpu/run.sh   # the same path on a CPU, tiny sizes (tests/test_gpu_check.py)
# Install: the wheels benchmarks/gpu/prepare.sh put in .gpu/whl (WHEELS=folder) go into this machine's own
# Python, never onto PYTHONPATH: the grader stops when its sandboxed children would import other torch or
# transformers than it does. INSTALL_DRY_RUN=1 only asks pip whether they would install. The kit runs from this tree.
# Parts (issue #33's checks and #42's goals): side by side first, JOBS at once (one GPU, 16 cores), then the
# timings alone. Time: the deadline counts from the start, install included. The side phase may use SIDE_PERCENT
# of the time left when it starts; each timing after it may use what is left less MIN_S for each timing still to
# come. A part whose share is under MIN_S is "not run (time)"; one that overruns its share is killed, "TIMED OUT".
# After each part, $OUT/gpu-logs.tgz (logs, JSON, summary) and $OUT/summary.txt are
# written again (to a temporary name, then renamed), so a run killed from outside still returns what ended;
# benchmarks/gpu/summary.py makes the one-screen summary. ONLY=REGEX runs the matching parts, SKIP=REGEX leaves
# those out (QUICK leaves out the grader); DRY_RUN=1 prints the plan; ON_PACK=COMMAND runs after each re-pack with
# $OUT as $1 (how tests/test_gpu_check.py looks at $OUT after each part).
# Exit 0 when every part ran and passed (a goal not reached is a number, not a failure), 3 when install failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
FINAL=${OUT:-/tmp/out}; WHEELS=${WHEELS:-.gpu/whl}; ONLY=${ONLY:-.}; QUICK=${QUICK:-}
DEADLINE=${DEADLINE:-360}; SIDE_PERCENT=${SIDE_PERCENT:-65}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-XXXXXX"); R=$LOGS/results
mkdir -p "$R" "$LOGS/parts" "$FINAL" && chmod 755 "$LOGS" "$R"
trap 'rm -rf "$LOGS"' EXIT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false SPECDEC_PRESET=toy

record() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >> "$LOGS/status"; }   # part, verdict, seconds

pack() {  # the summary and the archive, each written to a temporary name and renamed into $OUT
  $PY benchmarks/gpu/summary.py "$LOGS" "$@" > "$LOGS/summary.txt.part" 2>> "$LOGS/summary.err" \
    && mv -f "$LOGS/summary.txt.part" "$LOGS/summary.txt" && cp "$LOGS/summary.txt" "$FINAL/summary.txt.part" \
    && mv -f "$FINAL/summary.txt.part" "$FINAL/summary.txt"
  tar -czf "$FINAL/gpu-logs.tgz.part" --warning=no-file-changed -C "$LOGS" . 2>> "$LOGS/summary.err"
  [ $? -le 1 ] && mv -f "$FINAL/gpu-logs.tgz.part" "$FINAL/gpu-logs.tgz"
  if [ -n "${ON_PACK:-}" ]; then bash -c "$ON_PACK" _ "$FINAL"; fi
}

run_part() {  # name seconds command: one part under its share of the time, its log, its verdict
  local name=$1 limit=$2 start=$SECONDS rc
  timeout --kill-after=5 "$limit" bash -c "$3" > "$LOGS/parts/$name.log" 2>&1; rc=$?
  verdict=passed; [ $rc = 0 ] || verdict="FAILED (exit $rc)"
  if [ $rc = 124 ] || [ $rc = 137 ]; then verdict="TIMED OUT (killed after $limit s)"; fi
  record "$name" "$verdict" $((SECONDS - start))
}

# 1. install (only where wheels were carried); the rest needs it
installed=yes
if [ -z "${DRY_RUN:-}" ] && ls "$WHEELS"/*.whl > /dev/null 2>&1; then
  pip="$PY -m pip install --no-index --no-deps --no-compile --no-cache-dir --upgrade${INSTALL_DRY_RUN:+ --dry-run}"
  wheels=$(printf '%q ' "$WHEELS"/*.whl)
  limit=$((DEADLINE - SECONDS)); [ $limit -le 120 ] || limit=120
  run_part install $limit "$pip $wheels || $pip --break-system-packages $wheels"
  mv "$LOGS/parts/install.log" "$LOGS/pip.log"; [ "$verdict" = passed ] || installed=
elif [ -z "${DRY_RUN:-}" ]; then
  record install "skipped (no wheels in $WHEELS)" 0
fi
# what ran where (package versions without importing them: quick), and the device when none was named
DEVICE=${DEVICE:-$($PY -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")' 2> /dev/null || echo cpu)}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
# prepare.sh names the commit it carried: the device tool's copy of .git can be older than the tree it copies
commit=$(cat .gpu/commit 2> /dev/null || git rev-parse --short HEAD 2> /dev/null || echo unknown)
$PY -c 'import importlib.metadata as m, platform
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return "absent"
print("python", platform.python_version(), "torch", version("torch"), "transformers", version("transformers"), end="")' \
  > "$LOGS/env.txt" 2>&1
[ "$DEVICE" = cpu ] || gpu=${gpu:-GPU name unknown (no nvidia-smi)}
echo "; ${gpu:-no GPU}; on $DEVICE; commit $commit; $(date -u '+%Y-%m-%d %H:%M UTC'); deadline $DEADLINE s" >> "$LOGS/env.txt"

# 2. the plan: "name|command"; tiny sizes with QUICK=1, smaller Pythia shapes on a CPU
if [ "$DEVICE" = cpu ]; then JOBS=${JOBS:-2}; NOTEBOOKS=${NOTEBOOKS:-01}; export OMP_NUM_THREADS=1 SPECDEC_THREADS=1
else JOBS=${JOBS:-8}; NOTEBOOKS=${NOTEBOOKS:-all}; export OMP_NUM_THREADS=2 SPECDEC_THREADS=2; fi
if [ -n "$QUICK" ]; then
  export SPECDEC_SANDBOX=${SPECDEC_SANDBOX:-none}   # rehearses this script, not the sandbox (tests/test_course.py)
  SKIP=${SKIP-^grader-}   # the grader takes 25 s of CPU at any size; tests/test_course.py grades the reference
  MIN_S=${MIN_S:-3}; SC="--samples 100 --decodes 10 --prompts 1 --max-new-tokens 8"; AGREE="--tokens 8"
  GOALS="--scale 0.0625 --vocab 256 --max-new-tokens 6 --repeats 1"; SYNC="--scale 0.0625 --max-new-tokens 4"
else
  MIN_S=${MIN_S:-20}; SC=""; AGREE=""; GOALS=""; SYNC=""
  if [ "$DEVICE" = cpu ]; then GOALS="--scale 0.0625"; SYNC="--scale 0.125"; fi
fi
SKIP=${SKIP-}
SELF="$PY -m specdec_helpers selfcheck --preset toy --device $DEVICE --no-progress"
side=("grader-fp16|$SELF --dtype fp16 --skip greedy,sampling,tree,hf,notebooks --json $R/grader-fp16.json"
      "grader-fp32|$SELF --dtype fp32 --skip greedy,sampling,tree,hf,notebooks --json $R/grader-fp32.json"
      "selfcheck-fp16|$SELF --dtype fp16 --skip hf,notebooks,grader $SC --json $R/selfcheck-fp16.json"
      "selfcheck-bf16|$SELF --dtype bf16 --skip hf,notebooks,grader $SC --json $R/selfcheck-bf16.json"
      "graphs-agree|$PY benchmarks/gpu/graphs_agree.py --device $DEVICE $AGREE --json $R/graphs-agree.json")
if [ "$NOTEBOOKS" = all ]; then NBS=$(ls notebooks/0*.ipynb); else NBS=$(for n in ${NOTEBOOKS//,/ }; do ls notebooks/"$n"_*.ipynb; done); fi
for nb in $NBS; do side+=("nbval-$(basename "$nb" | cut -c1-2)|$PY -m pytest -q -p no:cacheprovider $nb"); done
alone=("graphs-goals|$PY benchmarks/graphs_goals.py --device $DEVICE $GOALS --json $R/graphs-goals.json"
       "sync-count|$PY benchmarks/pythia_random_timing.py --device $DEVICE $SYNC --json $R/sync-count.json")
if [ $# -gt 0 ]; then side=(); alone=("command|$(printf '%q ' "$@")"); fi
for part in "${side[@]}"; do echo "side ${part%%|*}"; done > "$LOGS/plan"
for part in "${alone[@]}"; do echo "alone ${part%%|*}"; done >> "$LOGS/plan"
if [ -n "${DRY_RUN:-}" ]; then
  for part in "${side[@]}"; do echo "side  ${part%%|*}: ${part#*|}"; done
  for part in "${alone[@]}"; do echo "alone ${part%%|*}: ${part#*|}"; done
  exit 0
fi
# the grader's student user reads its kit view made from this tree
find . -path ./.git -prune -o -path ./.venv -prune -o -exec chmod a+rX {} + 2> /dev/null
pack

# 3. side by side, each part until the side phase ends; then the timings alone, each with what is left
chosen() {  # name: whether the part runs; if not, its verdict says why
  if ! [[ $1 =~ $ONLY ]]; then record "$1" "skipped (ONLY)" 0; return 1; fi
  if [ -n "$SKIP" ] && [[ $1 =~ $SKIP ]]; then record "$1" "skipped (SKIP=$SKIP)" 0; return 1; fi
  if [ -z "$installed" ]; then record "$1" "not run (install failed)" 0; return 1; fi
}
todo_side=() todo_alone=()
for part in "${side[@]}"; do chosen "${part%%|*}" && todo_side+=("$part"); done
for part in "${alone[@]}"; do chosen "${part%%|*}" && todo_alone+=("$part"); done
side_end=$((SECONDS + (DEADLINE - SECONDS) * SIDE_PERCENT / 100))
for part in "${todo_side[@]}"; do
  name=${part%%|*}
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; pack; done
  left=$((side_end - SECONDS))
  if [ $left -lt "$MIN_S" ]; then record "$name" "not run (time)" 0; continue; fi
  run_part "$name" "$left" "${part#*|}" &
done
while [ -n "$(jobs -rp)" ]; do wait -n; pack; done
wait; pack
for i in "${!todo_alone[@]}"; do
  part=${todo_alone[$i]}; name=${part%%|*}
  later=$((${#todo_alone[@]} - i - 1)); left=$((DEADLINE - SECONDS - later * MIN_S))
  if [ $left -lt "$MIN_S" ]; then record "$name" "not run (time)" 0; continue; fi
  run_part "$name" "$left" "${part#*|}"; pack
done

# 4. the summary, on the screen and in $OUT (and in the archive)
pack --final
cat "$FINAL/summary.txt" || cat "$LOGS/summary.err"
echo "gpu check: $SECONDS s of $DEADLINE; $FINAL/summary.txt and $FINAL/gpu-logs.tgz"
[ -n "$installed" ] || exit 3
[ "$(cut -f2 "$LOGS/status" | grep -cv '^passed\|^skipped')" = 0 ]
