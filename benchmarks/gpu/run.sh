#!/usr/bin/env bash
# Run on the GPU machine from the repository root: `bash benchmarks/gpu/run.sh [command...]` (default:
# benchmarks/gpu_readiness.sh). Installs the wheels carried in .gpu/whl (benchmarks/gpu/prepare.sh) into that
# machine's own Python: not onto PYTHONPATH, since the grader checks that its sandboxed processes import the
# grader's own torch and transformers. The kit itself runs from this tree. Leaves one archive of logs,
# $OUT/gpu-logs.tgz ($OUT: where the machine's caller collects files; else /tmp/out).
set -u
cd "$(dirname "$0")/../.."
FINAL=${OUT:-/tmp/out}; LOG=$(mktemp -d /tmp/gpu-logs-XXXXXX); mkdir -p "$FINAL"
chmod 755 "$LOG"
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .gpu/whl/*.whl \
    > "$LOG/pip.log" 2>&1 \
  || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --break-system-packages \
    .gpu/whl/*.whl >> "$LOG/pip.log" 2>&1 \
  || { tail "$LOG/pip.log"; exit 3; }
fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OUT=$LOG/results
chmod -R a+rX "$PWD"   # the grader's unprivileged student user reads the kit's view made from this tree
python3 -c 'import sys,torch,transformers;print("python",sys.version.split()[0],"torch",torch.__version__,"transformers",transformers.__version__,torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' \
  | tee "$LOG/env.txt"
if [ $# -eq 0 ]; then set -- bash benchmarks/gpu_readiness.sh; fi
"$@" 2>&1 | tee "$LOG/run.log"; rc=${PIPESTATUS[0]}
tar -czf "$FINAL/gpu-logs.tgz" -C "$LOG" .
echo "exit $rc; logs in $FINAL/gpu-logs.tgz"
exit $rc
