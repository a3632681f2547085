#!/usr/bin/env bash
# The GPU measurements benchmarks/RESULTS.md is waiting for ("No GPU figure yet"): run on the course's GPU
# (Colab T4, L4, A100...) from the repository root, then copy the printed tables and the JSON paths into
# RESULTS.md with the device and the date. Runs on a CPU too (DEVICE=cpu, smaller sizes): that is how CI
# keeps these commands working.
#   bash benchmarks/gpu_readiness.sh            # everything, on CUDA when there is a GPU
#   DEVICE=cpu bash benchmarks/gpu_readiness.sh  # the same commands on the CPU
set -uo pipefail
export SPECDEC_PRESET=toy HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
DEVICE=${DEVICE:-$(python -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
status=0
if [ "$DEVICE" = cpu ]; then SCALE=${SCALE:-0.125}; NOTEBOOKS=${NOTEBOOKS:-01}; else SCALE=${SCALE:-1}; NOTEBOOKS=${NOTEBOOKS:-all}; fi

# 1. selfcheck on the toy pair in fp32, fp16 and bf16 (notebooks and grader once, in fp32: they pick their own dtype).
for dtype in fp32 fp16 bf16; do
  skip=""; [ "$dtype" != fp32 ] && skip="--skip notebooks,grader"
  python -m specdec_helpers selfcheck --preset toy --device "$DEVICE" --dtype "$dtype" --notebooks "$NOTEBOOKS" $skip \
    --json "$OUT/selfcheck-toy-$DEVICE-$dtype.json" || status=1
done

# 2. Pythia-1.4b/160m shapes, random weights built here: step, verify and draft costs, c, the bound, syncs per round.
python benchmarks/pythia_random_timing.py --device "$DEVICE" --scale "$SCALE" --json "$OUT/pythia-random-$DEVICE.json" || status=1

# 2b. Issue 36's four goals: CUDA graphs over static caches against eager decoding and HF assisted generation.
GSCALE=$([ "$DEVICE" = cpu ] && echo 0.0625 || echo "$SCALE")
python benchmarks/graphs_goals.py --device "$DEVICE" --scale "$GSCALE" $([ "$DEVICE" = cpu ] && echo "--max-new-tokens 8 --repeats 1") \
  --json "$OUT/graphs-goals-$DEVICE.json" || status=1

# 3. The notebooks under nbval on this device (load_pair picks CUDA and fp16 when there is a GPU).
if [ "$NOTEBOOKS" = all ]; then nbs=notebooks/; else nbs=$(for n in ${NOTEBOOKS//,/ }; do ls notebooks/${n}_*.ipynb; done); fi
python -m pytest -q -p no:cacheprovider $nbs || status=1

echo "gpu_readiness: $([ $status = 0 ] && echo all passed || echo SOMETHING FAILED) on $DEVICE; JSON in $OUT/"
exit $status
