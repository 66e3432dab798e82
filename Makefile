# m3-image. `make demo` builds the stand-in base and the patched image from a fresh machine;
# `make test` runs the suite. Production: `make image` (target mi300x, once pinned and locked).
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
TARGET  ?=
SPEC    ?= image.yaml
IMAGE   ?=
BUILDER := $(PY) -m builder --spec $(SPEC)
TARGET_ARG := $(if $(TARGET),--target $(TARGET),)

.PHONY: patches check-patches sweep-numerics gpu-bundle venv services standin lock image dry-run demo demo-pinned test unit validate push resolve verify matrix bench bench-convert bench-delivery bench-matrix clean

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml requirements/vllm-runtime.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]' -r requirements/vllm-runtime.txt
	touch $@

services:            ## install the Debian packages, start dockerd and the local registries (root; idempotent)
	bash scripts/install-packages.sh
	bash scripts/start-dockerd.sh
	bash scripts/start-registry.sh

STANDIN := $(PY) -m standin --spec $(SPEC)

standin: venv        ## build + push the stand-in bases (0.24.0 and pinned 4a560dd), pin the `standin` and `standin-4a560dd` targets
	$(STANDIN)

lock: venv           ## write the target's lock (TARGET=name)
	$(BUILDER) lock $(TARGET_ARG)

image: venv          ## build, validate and tag the target's image (TARGET=name)
	$(BUILDER) image $(TARGET_ARG)

dry-run: venv
	$(BUILDER) image $(TARGET_ARG) --dry-run

demo: venv services  ## from a fresh machine: stand-in base -> lock -> validated image
	$(STANDIN)
	$(BUILDER) lock --target standin
	$(BUILDER) image --target standin

demo-pinned: venv services  ## the production definition on the pinned-faithful stand-in (vLLM 4a560dd8 touched files)
	$(STANDIN)
	$(BUILDER) lock --target standin-4a560dd
	$(BUILDER) image --target standin-4a560dd

test: venv services  ## the whole suite: starts the services; the tests build the stand-ins and nested engines they need
	$(PY) -m pytest -q

lint: venv           ## ruff (lint + format check) and mypy, configured in pyproject.toml
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

unit: venv           ## fast engine-free unit tests (seconds): no docker, no registry, no network, no vLLM sources
	$(PY) -m pytest -q -p no:cacheprovider -m "not docker and not registry and not vllm_sources" tests/unit tests/builder

validate: venv       ## run the in-image smoke suite against IMAGE=ref
	$(BUILDER) validate $(IMAGE)

push: venv           ## push the validated image by its content tag, then move the aliases (TARGET=name)
	$(BUILDER) push $(TARGET_ARG)

resolve: venv        ## print IMAGE=repo@sha256:..., PYXIS_IMAGE=..., CACHE_KEY=... (TARGET=name or IMAGE=ref)
	$(BUILDER) resolve $(TARGET_ARG) $(IMAGE)

verify: venv         ## check IMAGE=ref against the target's lock before using it (TARGET=name)
	$(BUILDER) verify $(TARGET_ARG) $(IMAGE)

VERSIONS ?= 0.24.0..0.34.0
SERIES   ?= patches/series patches/series.v0.30.0 patches/series.v0.34.0 patches/series.pinned-4a560dd
MATRIX   ?= docs/compat-matrix.md
matrix: venv         ## compatibility matrix: SERIES over the vLLM releases VERSIONS (PyPI), written to MATRIX
	$(BUILDER) matrix $(VERSIONS) $(foreach s,$(SERIES),--series $(s)) --output $(MATRIX) --json $(MATRIX:.md=.json)

bench-matrix: venv   ## seconds to compute the matrix for 11 releases, cold and warm wheel cache
	$(PY) bench/bench_matrix.py

bench-delivery: venv ## make image when the content tag is already published: seconds and bytes
	$(PY) bench/bench_delivery.py --spec $(SPEC) $(if $(TARGET),--target $(TARGET),)

bench: venv          ## build-time figures: incremental build, delta bytes, no-op rebuild
	$(PY) bench/bench_build.py

bench-convert: venv  ## MXFP8 -> block-FP8 conversion throughput and error (CPU here)
	$(PY) bench/bench_convert.py --device cpu

patches:             ## regenerate the new-file patches (0001) from patches/src/
	$(PYTHON) patches/regen.py

check-patches:       ## fail if a generated patch drifted from patches/src/
	$(PYTHON) patches/regen.py --check

sweep-numerics: venv ## printed sweep behind the numerics gates: 8 seeds, correct images and subtle faults (CPU)
	$(PY) bench/sweep_numerics.py --seeds 8

gpu-bundle: venv     ## .gpu/ for tests/gpu/device_numerics.py on a CUDA machine without vLLM or network
	PY=$(PY) bash tests/gpu/make_bundle.sh

clean:
	rm -rf build/context build/reports
