#!/usr/bin/env bash
# Run on your own machine (with network), from the repository root: puts in .gpu/ (ignored by git) the wheels
# a bare GPU machine lacks: it has Python 3.12, a CUDA torch, an older transformers (the kit needs the forward's
# cache= argument, transformers >= 5.24), no Jupyter stack, and nothing can be fetched there. Then copy the tree
# with .gpu/ to that machine (with the device tool: carry .gpu) and run `bash benchmarks/gpu/run.sh` there: at most
# 6 minutes, a summary and one archive of logs in $OUT (benchmarks/RESULTS.md, "On a GPU").
#   PYVER=3.12 bash benchmarks/gpu/prepare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PYVER=${PYVER:-3.12}
grep -qxF '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu/whl && mkdir -p .gpu/whl
git describe --always --dirty > .gpu/commit   # the GPU machine's copy of the tree may have no .git: run.sh reads this
python3 -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_34_x86_64 --platform any -d .gpu/whl \
  "transformers>=5.24,<6" nbval nbclient nbformat ipykernel "ipywidgets>=8,<9" "copydetect>=0.5,<0.6" 2>&1 \
  | grep -v WARNING || true
# what such an image already has (keeps the carried tree well under 64 MiB); torch is never carried
cd .gpu/whl && rm -f torch-* nvidia_* triton-* numpy-* matplotlib-* pillow-* fonttools-* kiwisolver-* contourpy-* \
  pyparsing-* pydantic* huggingface_hub-* hf_xet-* httpx* httpcore* h11-* anyio-* idna-* tokenizers-* safetensors-* \
  typer-* click-* rich-* typing_extensions-* tzdata-* python_dateutil-* six-* fsspec-* filelock-* packaging-* \
  pyyaml-* tqdm-* jinja2-* markupsafe-* pygments-* markdown_it_py-* mdurl-* psutil-* coverage-* attrs-* truststore-* \
  shellingham-* cycler-* annotated* typing_inspection* certifi* sniffio* pytest-* pluggy-* iniconfig-* 2>/dev/null
cd ../..
ls .gpu/whl | sed 's/-py.*//; s/-cp.*//' | tr '\n' ' '; echo
du -sh .gpu
echo "carry .gpu/ with the tree; on the GPU machine: bash benchmarks/gpu/run.sh"
