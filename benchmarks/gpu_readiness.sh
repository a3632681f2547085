#!/usr/bin/env bash
# One command for the course's GPU (an H100, a Colab T4/L4/A100...), from the repository root:
#   bash benchmarks/gpu_readiness.sh             # on CUDA when there is a GPU
#   DEVICE=cpu bash benchmarks/gpu_readiness.sh  # the same parts on the CPU, smaller (how CI keeps it working)
# On a bare GPU machine (no kit packages, no network) run it through benchmarks/gpu/run.sh, which installs the
# wheels benchmarks/gpu/prepare.sh carried in. Parts:
#   1. side by side (independent; JOBS at once, each with few threads; one GPU is shared):
#      selfcheck in fp32, fp16 and bf16, each with its algorithm checks, the notebooks' check cells and the
#      grader on the reference solution (notebooks and grader load their pairs in that dtype: $SPECDEC_DTYPE);
#      nbval on every notebook (load_pair's own pick: CUDA and fp16 on a GPU);
#   2. alone, after: the timings (ours vs HF per dtype; Pythia-1.4b/160m shapes with random weights).
# Each part has BUDGET seconds (default 300: the whole run stays under 6 minutes on an H100). Logs and JSON go
# to $OUT (default benchmarks/results), one archive of them to $OUT/gpu-readiness-logs.tgz; a table at the end.
# ONLY=REGEX runs only the parts whose names match; DRY_RUN=1 prints the parts without running them.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export SPECDEC_PRESET=toy HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
DEVICE=${DEVICE:-$($PY -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}
OUT=${OUT:-benchmarks/results}; LOGS=$OUT/logs; ONLY=${ONLY:-.}
mkdir -p "$LOGS"
if [ "$DEVICE" = cpu ]; then
  BUDGET=${BUDGET:-1500}; SCALE=${SCALE:-0.125}; NOTEBOOKS=${NOTEBOOKS:-01}; JOBS=${JOBS:-2}; SMALL="--samples 600 --decodes 60 --prompts 1 --repeats 1"
else
  BUDGET=${BUDGET:-300}; SCALE=${SCALE:-1}; NOTEBOOKS=${NOTEBOOKS:-all}; JOBS=${JOBS:-8}; SMALL=""
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} SPECDEC_THREADS=${SPECDEC_THREADS:-2}
if [ "$NOTEBOOKS" = all ]; then NBS=$(ls notebooks/0*.ipynb); else NBS=$(for n in ${NOTEBOOKS//,/ }; do ls notebooks/${n}_*.ipynb; done); fi
SELF="$PY -m specdec_helpers selfcheck --preset toy --device $DEVICE $SMALL"

side=() alone=()   # "name|command"
for dtype in fp32 fp16 bf16; do
  side+=("selfcheck-$dtype-algorithm|$SELF --dtype $dtype --skip hf,notebooks,grader --json $OUT/selfcheck-$DEVICE-$dtype-algorithm.json")
  side+=("selfcheck-$dtype-grader|$SELF --dtype $dtype --skip greedy,sampling,tree,hf,notebooks --json $OUT/selfcheck-$DEVICE-$dtype-grader.json")
  for nb in $NBS; do  # one notebook per part: the slowest notebook, not their sum, bounds the run
    n=$(basename "$nb" | cut -c1-2)
    side+=("selfcheck-$dtype-notebook-$n|$SELF --dtype $dtype --skip greedy,sampling,tree,hf,grader --notebooks $n --json $OUT/selfcheck-$DEVICE-$dtype-notebook-$n.json")
  done
  alone+=("timing-$dtype-ours-vs-hf|$SELF --dtype $dtype --skip greedy,sampling,tree,notebooks,grader --json $OUT/selfcheck-$DEVICE-$dtype-hf.json")
done
for nb in $NBS; do
  side+=("nbval-$(basename "$nb" .ipynb)|$PY -m pytest -q -p no:cacheprovider $nb")
done
alone+=("timing-pythia-shapes|$PY benchmarks/pythia_random_timing.py --device $DEVICE --scale $SCALE --json $OUT/pythia-random-$DEVICE.json")
# issue 36's four goals: CUDA graphs over static caches against eager decoding and HF assisted generation
GSCALE=$([ "$DEVICE" = cpu ] && echo 0.0625 || echo "$SCALE"); GSMALL=$([ "$DEVICE" = cpu ] && echo "--max-new-tokens 8 --repeats 1")
alone+=("timing-graphs-goals|$PY benchmarks/graphs_goals.py --device $DEVICE --scale $GSCALE $GSMALL --json $OUT/graphs-goals-$DEVICE.json")

run_part() {  # name command...: one part, its log, its verdict line in $LOGS/status
  local name=$1; shift
  local start=$SECONDS
  timeout --kill-after=10 "$BUDGET" bash -c "$*" > "$LOGS/$name.log" 2>&1
  local rc=$?
  local verdict=passed; [ $rc = 0 ] || verdict="FAILED (exit $rc)"; [ $rc = 124 ] && verdict="TIMED OUT (${BUDGET} s)"
  printf '%-36s %-22s %4d s\n' "$name" "$verdict" $((SECONDS - start)) >> "$LOGS/status"
}

: > "$LOGS/status"
started=$SECONDS
for phase in side alone; do
  declare -n parts=$phase
  for part in "${parts[@]}"; do
    name=${part%%|*}; command=${part#*|}
    [[ $name =~ $ONLY ]] || continue
    if [ -n "${DRY_RUN:-}" ]; then echo "$phase  $name: $command"; continue; fi
    if [ $phase = side ]; then
      while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
      run_part "$name" "$command" &
    else
      run_part "$name" "$command"
    fi
  done
  wait
done
[ -n "${DRY_RUN:-}" ] && exit 0
sort "$LOGS/status" > "$LOGS/status.sorted" && mv "$LOGS/status.sorted" "$LOGS/status"
cat "$LOGS/status"
tar -czf "$OUT/gpu-readiness-logs.tgz" -C "$OUT" logs $(cd "$OUT" && ls *.json 2>/dev/null)
failed=$(grep -vc ' passed ' "$LOGS/status")
echo "gpu_readiness: $([ "$failed" = 0 ] && echo all passed || echo "$failed part(s) FAILED") on $DEVICE in $((SECONDS - started)) s; logs in $OUT/gpu-readiness-logs.tgz"
[ "$failed" = 0 ]
