#!/usr/bin/env bash
# Build .gpu/ (git-ignored): what tests/gpu/device_numerics.py needs on a bare CUDA machine
# with torch + Triton but no vLLM and no network (the device tool's nvidia-h200, Python 3.12):
#   .gpu/vllm-site.tar.xz  vLLM 0.24.0's Python tree (build/cache, from the PyPI wheel) with
#                          patches/series applied by the builder's own patch stack; no .so files
#   .gpu/whl/              wheels vLLM's imports need that such a machine lacks
#   .gpu/repo/             smoke/ and tests/gpu/ of this checkout
# Then, there:  bash .gpu/repo/tests/gpu/run_bundle.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
rm -rf .gpu/repo .gpu/site && mkdir -p .gpu/whl .gpu/repo/tests .gpu/site
"$PY" - <<'PYEOF'
import shutil
from pathlib import Path
from builder.patchstack import apply_stack, load_series
from standin.vllm_sources import vllm_site
pristine = vllm_site(Path("build/cache"))
shutil.copytree(pristine / "vllm", Path(".gpu/site/vllm"), ignore=shutil.ignore_patterns("__pycache__", "*.so"))
apply_stack(load_series(Path("patches/series")), Path(".gpu/site"))
PYEOF
tar -C .gpu/site -cf - vllm | xz -T0 -6 > .gpu/vllm-site.tar.xz
rm -rf .gpu/site
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d .gpu/whl pyzmq==27.3.0 pydantic==2.14.4 pydantic_core==2.50.5 typing-inspection==0.4.5 annotated-types==0.8.0 \
  cbor2==6.3.0 openai==3.57.0 openai-harmony==0.0.8 jiter==0.19.0 sniffio==1.3.1 distro==1.9.0 \
  typing_extensions==4.16.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 anyio==4.16.0
cp -r smoke .gpu/repo/ && cp -r tests/gpu .gpu/repo/tests/
find .gpu/repo -name __pycache__ -prune -exec rm -rf {} +
du -sh .gpu
