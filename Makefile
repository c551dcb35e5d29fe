# Two commands do everything on a fresh machine:  make demo   and   make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install lint bench data docs clean check-gpu-api

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpupipe needs Python >= 3.11 (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# gpupipe's bytecode once (an editable install has none), also where PYTHONDONTWRITEBYTECODE
	@# is set: every process of a run (and of the suite) would compile the package again
	@$(BIN)/python -m compileall -q gpupipe > /dev/null
	@touch $@

# The CPU kernels compiled ahead of time into gpupipe/kernels (about 1.5 min, once; again when a
# kernel's source changes): no run, worker or test process compiles them (gpupipe/kernels/aot.py)
AOT := gpupipe/kernels/_compiled.index
$(AOT): $(STAMP) $(wildcard gpupipe/kernels/*.py)
	$(BIN)/gpupipe warmup --aot

install: $(STAMP) $(AOT)

demo: $(STAMP) $(AOT)
	$(BIN)/gpupipe run pipelines/quickstart.yaml --overwrite
	@$(BIN)/python -m gpupipe.demo out/quickstart

# A real Triton Inference Server for tests/stages/test_triton.py: nvidia-pytriton needs numpy < 2,
# so it lives in a venv of its own, as a server would. Without it those tests skip.
TRITON_VENV := .venv-triton
$(TRITON_VENV)/.installed:
	@test -x $(TRITON_VENV)/bin/python || $(PYTHON) -m venv $(TRITON_VENV)
	@$(TRITON_VENV)/bin/python -m pip install --quiet 'nvidia-pytriton==0.7.*' \
		&& touch $@ \
		|| echo "make: the Triton test server could not be installed; tests/stages/test_triton.py will skip"

# A real Slurm for tests/cluster/test_slurm.py: Debian's slurm-wlm and munge, installed when this
# runs as root with apt-get (about 12 s). Without them those tests skip, saying why.
SLURM_TRIED := $(VENV)/.slurm-tried
$(SLURM_TRIED): | $(BIN)/python
	@if ! command -v slurmd >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null 2>&1 \
		|| { apt-get update >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null 2>&1; } \
		|| echo "make: slurm-wlm and munge could not be installed; tests/cluster/test_slurm.py will skip"; \
	fi
	@touch $@

# UCX for tests/cluster/test_hosts.py: distributed-ucxx 0.52 and its libraries (no GPU needed)
# in a venv of their own, over the suite's packages (a .pth adds .venv's site-packages after
# its own), so that the suite's venv stays free of RAPIDS. Without it the UCX test skips.
UCX_VENV := .venv-ucx
UCX_SITE  = $$($(UCX_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
$(UCX_VENV)/.installed: $(STAMP)
	@test -x $(UCX_VENV)/bin/python || $(PYTHON) -m venv $(UCX_VENV)
	@$(UCX_VENV)/bin/python -m pip install --quiet --no-deps 'distributed-ucxx-cu12==0.52.*' \
		'ucxx-cu12==0.52.*' 'libucxx-cu12==0.52.*' libucx-cu12 'librmm-cu12==26.10.*' \
		'rmm-cu12==26.10.*' 'rapids-logger==0.3.*' \
		&& echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
			> "$(UCX_SITE)/zz_gpupipe_suite.pth" \
		&& touch $@ \
		|| echo "make: the UCX packages could not be installed; the UCX test in tests/cluster will skip"

# MosaicML Streaming for tests/shards/test_mds.py: mosaicml-streaming 0.13 pins numpy < 2.2 and
# transformers < 5, which the suite's venv cannot have, so it lives in a venv of its own over the
# suite's packages (a .pth, as for UCX) with the few libraries it imports. Without it that test
# skips.
STREAMING_VENV := .venv-streaming
STREAMING_SITE  = $$($(STREAMING_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
$(STREAMING_VENV)/.installed: $(STAMP)
	@test -x $(STREAMING_VENV)/bin/python || $(PYTHON) -m venv $(STREAMING_VENV)
	@$(STREAMING_VENV)/bin/python -m pip install --quiet --no-deps 'mosaicml-streaming==0.13.*' \
		python-snappy cramjam zstd pillow catalogue \
		&& echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
			> "$(STREAMING_SITE)/zz_gpupipe_suite.pth" \
		&& touch $@ \
		|| echo "make: mosaicml-streaming could not be installed; tests/shards/test_mds.py will skip its read-back"

# A real S3-compatible server for tests/io/test_s3.py and benchmarks/bench_storage.py: moto's
# moto_server in a venv of its own, as a server would be (its boto3 pins would otherwise make
# pip backtrack over botocore with s3fs's aiobotocore). Without it those tests skip.
MOTO_VENV := .venv-moto
$(MOTO_VENV)/.installed:
	@test -x $(MOTO_VENV)/bin/python || $(PYTHON) -m venv $(MOTO_VENV)
	@$(MOTO_VENV)/bin/python -m pip install --quiet 'moto[server]==5.2.*' 'flask-cors==6.0.*' \
		&& touch $@ \
		|| echo "make: the S3 test server (moto) could not be installed; tests/io/test_s3.py will skip"

# two test processes (the suite's heavy tests run subprocesses and clusters of their own)
TEST_JOBS ?= 2
test: $(STAMP) $(AOT) $(TRITON_VENV)/.installed $(SLURM_TRIED) $(UCX_VENV)/.installed \
	$(STREAMING_VENV)/.installed $(MOTO_VENV)/.installed
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadgroup

# The API contract with cuDF 26.10 / dask-cuda / KvikIO: installs '.[gpu]' (about 5 GB, no GPU
# needed: the packages import without one) into its own venv and checks every name and keyword
# gpupipe calls. Not part of `make test`.
GPU_API_VENV := .venv-gpu-api
check-gpu-api:
	@test -x $(GPU_API_VENV)/bin/python || $(PYTHON) -m venv $(GPU_API_VENV)
	$(GPU_API_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GPU_API_VENV)/bin/python -m pip install --quiet -e '.[gpu]' 'pytest>=8'
	$(GPU_API_VENV)/bin/python -m pytest -p no:cacheprovider tests/test_gpu_contract.py \
		tests/kernels/test_seam.py

lint: $(STAMP)
	$(BIN)/ruff check gpupipe tests benchmarks
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_quickstart.py
	$(BIN)/python benchmarks/bench_shards.py
	$(BIN)/python benchmarks/bench_dedup.py
	$(BIN)/python benchmarks/bench_filters.py
	$(BIN)/python benchmarks/bench_classify.py

# docs/reference/ is generated from the schema and the stage registry (tests fail when stale)
docs: $(STAMP)
	$(BIN)/gpupipe docs

data: $(STAMP)
	$(BIN)/python data/make_sample.py

clean:
	rm -rf $(VENV) $(GPU_API_VENV) $(TRITON_VENV) out .pytest_cache .hypothesis \
		gpupipe/kernels/_compiled*
