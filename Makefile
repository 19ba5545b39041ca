# Quick start: `make run` (default case) and `make test` (whole suite). Both create .venv if needed.
# `make test` also installs what the MPI, Slurm and MQTT tests need: as root on Debian/Ubuntu the system
# packages below (skipped when present), then mpi4py, mpi4jax and the Hydra Slurm launcher.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
APT_PACKAGES := slurm-wlm munge libopenmpi-dev openmpi-bin mosquitto openssl lammps
# mpi4jax builds its CUDA extension when it finds CUDA headers under CUDA_PATH (or next to nvcc);
# an empty folder builds the CPU-only extension, which is what a machine with nvcc but no CUDA
# runtime needs. On a GPU cluster: `make test MPI4JAX_CUDA_PATH=/usr/local/cuda`.
MPI4JAX_CUDA_PATH ?= $(CURDIR)/$(VENV)/no-cuda

.PHONY: run test lint format validate bench clean system-packages gpu-install gpu-check native \
	gpu-wheels gpu-check-offline

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Debian packages of the Slurm/MPI tests; only as root and only those missing (reruns stay fast).
# Not root, or no apt: nothing is installed and the tests that need them skip.
system-packages:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		missing=""; \
		for p in $(APT_PACKAGES); do \
			dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' \
				|| missing="$$missing $$p"; \
		done; \
		if [ -n "$$missing" ]; then \
			echo "installing:$$missing"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -q \
			&& DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
		fi; \
	fi

# The test extras. mpi4py and mpi4jax compile against the system MPI, so the `mpi` extra is
# installed only where `mpicc` exists; without it the stamp is not written and the next run retries.
# mpi4jax compiles against the XLA FFI headers of the jaxlib in pip's isolated build environment,
# which is the newest jaxlib for this Python unless constrained: on Python 3.12 that was 0.12.1
# beside an installed 0.11.2, and every MPI call failed to register (FFI API 0.5 against 0.4).
# JAXLIB_PIN holds the build to the jaxlib that is installed (pip's --build-constraint: pip 26
# no longer applies PIP_CONSTRAINT to build environments). Checked by importing mpi4jax after
# the CPU back end is up (it registers its FFI targets then): an mpi4jax built against another
# jaxlib (an older venv, or a wheel pip cached, keyed by the source archive alone) is rebuilt.
JAXLIB_PIN = $(VENV)/jaxlib-constraint.txt
define pin_jaxlib
$(BIN)/python -c "import jaxlib; print('jaxlib==' + jaxlib.__version__)" > $(JAXLIB_PIN)
endef
# mpi4jax rebuilt from source against the pinned jaxlib and the CUDA_PATH given as $(1)
define build_mpi4jax
CUDA_PATH="$(1)" $(BIN)/python -m pip install --quiet --no-cache-dir \
	--build-constraint "$(JAXLIB_PIN)" --force-reinstall --no-deps \
	--no-binary mpi4jax 'mpi4jax>=0.9,<0.10'
endef
$(TEST_STAMP): $(STAMP) pyproject.toml | system-packages
	@extras=dev,slurm; \
	if command -v mpicc >/dev/null; then extras=dev,slurm,mpi; fi; \
	mkdir -p "$(MPI4JAX_CUDA_PATH)"; \
	$(pin_jaxlib) || exit 1; \
	echo "pip install -e .[$$extras] ($$(cat $(JAXLIB_PIN)))"; \
	CUDA_PATH="$(MPI4JAX_CUDA_PATH)" $(BIN)/python -m pip install --quiet \
		--build-constraint "$(JAXLIB_PIN)" -e ".[$$extras]" || exit 1; \
	if [ $$extras = dev,slurm,mpi ]; then \
		$(BIN)/python -c "import jax; jax.devices(); import mpi4jax" 2>/dev/null || { \
			echo "mpi4jax does not load with this jaxlib: rebuilding it"; \
			$(call build_mpi4jax,$(MPI4JAX_CUDA_PATH)) || exit 1; \
			$(BIN)/python -c "import jax; jax.devices(); import mpi4jax" || exit 1; }; \
		touch $(TEST_STAMP); \
	else \
		echo "no MPI compiler (mpicc): mpi4py and mpi4jax not installed; the MPI tests skip"; \
	fi

run: $(STAMP)
	$(BIN)/python -m solver $(ARGS)

# The native in-place kernel (fluid.kernel=native): one library per lattice and precision, built
# with this machine's g++ into build/native/ (about a minute on two cores; rebuilt only when its
# source, the lattices or jaxlib change). A run that asks for it builds what is missing itself.
native: $(STAMP)
	$(BIN)/python -m solver.fluid.native

# Two pytest-xdist workers: most test time is single-threaded XLA compilation, so two workers
# use both cores of a CI machine. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

# the libraries the tests use (the others are built by the long tests that use them)
test: $(TEST_STAMP)
	$(BIN)/python -m solver.fluid.native D2Q9:float32 D2Q9:float64 D2Q9:float16 \
		D3Q19:float32 D3Q19:float64 D3Q19:float16
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

validate: $(TEST_STAMP)
	$(BIN)/python -m validation $(ARGS)
	$(BIN)/python -m pytest -q -m long

test-long: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -m long $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# GPU nodes: the CUDA jaxlib (the `gpu` extra) and mpi4jax rebuilt from source against the real
# CUDA (the test stamp's build has no CUDA extension and pip's wheel cache would keep it), then
# checked: JAX's back end must be gpu and, where MPI exists, mpi4jax's CUDA extension must load.
CUDA_PATH ?= /usr/local/cuda
GPU_EXTRA ?= gpu
gpu-install: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,$(GPU_EXTRA)]'
	@if command -v mpicc >/dev/null; then \
		$(pin_jaxlib) || exit 1; \
		echo "building mpi4jax against CUDA_PATH=$(CUDA_PATH), $$(cat $(JAXLIB_PIN))"; \
		$(call build_mpi4jax,$(CUDA_PATH)) || exit 1; \
		$(BIN)/python -c "from mpi4jax._src.xla_bridge import HAS_CUDA_EXT; \
			assert HAS_CUDA_EXT, 'mpi4jax has no CUDA extension: set CUDA_PATH to the CUDA toolkit'"; \
	fi
	$(BIN)/python -c "import jax; b = jax.default_backend(); \
		assert b == 'gpu', f'JAX back end is {b}, not gpu: no CUDA jaxlib or no visible GPU'"

# The GPU acceptance check (docs/performance.md, "GPU"): bandwidth, MLUPS per lattice and storage,
# bytes per cell, agreement with the CPU, halo exchange and weak scaling with >= 2 GPUs.
gpu-check: gpu-install
	$(BIN)/python -m solver.bench gpu-check $(ARGS)

# GPU nodes with no package index whose Python already has a CUDA JAX (docs/performance.md,
# "GPU"): `make gpu-wheels` where pip works, carry .whl/ and the checkout to the node, then
# `make gpu-check-offline` there (PYTHON=python3 by default; OUT=dir for the log).
gpu-wheels: $(STAMP)
	PYTHON=$(BIN)/python launch/gpu_wheels.sh .whl

gpu-check-offline:
	launch/gpu_check_offline.sh $(OUT)

bench: $(STAMP)
	$(BIN)/python -m solver.bench $(ARGS)

clean:
	rm -rf $(VENV) outputs multirun validation_out bench_out
