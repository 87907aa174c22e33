# tiermem: every target does its own set-up on a fresh machine.
#   make serve   run the daemon with the built-in default config
#   make test    lint, proto check and the whole test suite
#   make bench   run every benchmark under bench/ and refresh bench/results/

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROTO_VENV := .venv-proto
PROTO_STAMP := $(PROTO_VENV)/.installed
# The generator is pinned to the oldest protobuf runtime we support (lmcache
# installs protobuf 6.x and grpcio 1.78): code from newer grpcio-tools fails there.
GRPC_TOOLS := grpcio-tools==1.78.0 mypy-protobuf==5.1.0
PYTEST_ARGS ?=
# CPU torch from this machine's local wheel; a newer or unpinned torch pulls CUDA.
TORCH  := torch==2.13.0
# lmcache lives in its own venv: it lowers grpcio, protobuf and numpy below ours.
LMCACHE_VENV := .venv-lmcache
LMCACHE_STAMP := $(LMCACHE_VENV)/.installed
LMCACHE_CONSTRAINTS := tests/lmcache/constraints.txt

.PHONY: venv lmcache-venv serve test lint typecheck proto proto-check unit bench clean

venv: $(STAMP)

# The same script installs the Docker image (see Dockerfile): CPU torch first
# (a local wheel here), then the extras.
$(STAMP): pyproject.toml .ci/install-python
	PYTHON=$(PYTHON) TORCH=$(TORCH) .ci/install-python $(VENV) server,test --editable
	touch $@

# lmcache 0.5.6 plus the tiermem client (editable, no extra deps) for the
# LMCache integration tests and the LMCache peer of the benchmarks.
lmcache-venv: $(LMCACHE_STAMP)

$(LMCACHE_STAMP): $(LMCACHE_CONSTRAINTS) pyproject.toml
	test -x $(LMCACHE_VENV)/bin/python || $(PYTHON) -m venv $(LMCACHE_VENV)
	$(LMCACHE_VENV)/bin/pip install -q --upgrade pip
	$(LMCACHE_VENV)/bin/pip install -q $(TORCH)
	LMCACHE_TRACK_USAGE=false $(LMCACHE_VENV)/bin/pip install -q -c $(LMCACHE_CONSTRAINTS) lmcache
	$(LMCACHE_VENV)/bin/pip install -q --no-deps -e .
	touch $@

$(PROTO_STAMP):
	test -x $(PROTO_VENV)/bin/python || $(PYTHON) -m venv $(PROTO_VENV)
	$(PROTO_VENV)/bin/pip install -q $(GRPC_TOOLS)
	touch $@

# Regenerate tiermem/v1 from proto/.
proto: $(PROTO_STAMP)
	PATH=$(abspath $(PROTO_VENV))/bin:$$PATH .ci/gen-proto $(PROTO_VENV)/bin/python .

# Fails if the checked-in generated code differs from a fresh generation.
proto-check: $(PROTO_STAMP)
	rm -rf .proto-check && mkdir -p .proto-check
	PATH=$(abspath $(PROTO_VENV))/bin:$$PATH .ci/gen-proto $(PROTO_VENV)/bin/python .proto-check
	diff -r -x __pycache__ .proto-check/tiermem/v1 tiermem/v1
	rm -rf .proto-check
	@echo "generated protobuf code is up to date"

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p tiermem

serve: venv
	$(BIN)/tiermem serve --data-dir ./tiermem-data

test: venv lmcache-venv lint proto-check
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

unit: venv
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

bench: venv
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m bench.run_all
	$(BIN)/python -m bench.goals_table --write

clean:
	rm -rf .proto-check build *.egg-info .pytest_cache .mypy_cache .ruff_cache
