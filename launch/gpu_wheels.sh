#!/usr/bin/env bash
# Wheels of the project's Python packages that a GPU node's own CUDA JAX environment lacks, for
# an install there with no package index (launch/gpu_check_offline.sh installs them).
#
#   launch/gpu_wheels.sh [DEST]          (default .whl/, ignored by git; `make gpu-wheels`)
#
# Run it where pip reaches an index. The versions are those of the project's venv (the ones the
# tests ran with). All are pure Python, so one wheel serves any Python 3 and platform; the
# antlr4 runtime that omegaconf pins is published as a source archive only, so it is built into
# a wheel here. What the node must already have (the workplace's CUDA image has them): jax with
# its CUDA plugin, numpy, h5py, orbax-checkpoint, matplotlib, rich, prometheus-client, PyYAML,
# and pytest for the tests on the GPU.
set -euo pipefail
dest=${1:-.whl}
PY=${PYTHON:-.venv/bin/python}
python_version=${GPU_PYTHON_VERSION:-3.12}
# the configs (hydra, omegaconf, antlr4), the twin's MQTT client, the STL loader
packages=(hydra-core omegaconf antlr4-python3-runtime paho-mqtt trimesh)

mkdir -p "$dest"
for name in "${packages[@]}"; do
    version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
    if [ "$name" = antlr4-python3-runtime ]; then
        "$PY" -m pip wheel --quiet --no-deps --wheel-dir "$dest" "$name==$version"
    else
        "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
            --python-version "$python_version" --dest "$dest" "$name==$version"
    fi
done
ls -l "$dest"
du -sh "$dest"
