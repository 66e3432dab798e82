#!/usr/bin/env bash
# On the CUDA machine, from the folder holding .gpu/: install the carried wheels, unpack the
# patched vLLM tree, run the harness; figures to stdout and OUTDIR/h200.json.
set -euo pipefail
OUT=${1:?usage: run_bundle.sh OUTDIR}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl
mkdir -p /tmp/v && tar -xJf .gpu/vllm-site.tar.xz -C /tmp/v
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING
python3 .gpu/repo/tests/gpu/device_numerics.py --vllm-site /tmp/v --json "$OUT/h200.json"
