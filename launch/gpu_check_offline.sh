#!/usr/bin/env bash
# `make gpu-check` on a GPU node that reaches no package index and whose Python already holds a
# CUDA JAX (this workplace's lent GPU machines: python3 with jax and its CUDA plugin, no network).
#
#   launch/gpu_check_offline.sh [OUT_DIR]        (`make gpu-check-offline`)
#
# It installs the wheels that launch/gpu_wheels.sh made (.whl/, carried to the node) into a
# scratch directory, puts the checkout on PYTHONPATH (nothing is installed into the node's Python)
# and runs `python -m solver.bench gpu-check` in parts, the issue's headline first (D3Q19 float32
# and float16 throughput), each under its own time limit inside a total budget, so that a short
# lease still returns the most important figures and a part that hangs costs only its own limit.
# Then the Pallas and CUDA kernels' tests against the XLA step and the native CPU kernel, on the
# GPU (they run interpreted or emulated on CPUs in `make test`), and last the preflight (report in OUT_DIR/preflight/) and this GPU's canary
# checksums (OUT_DIR/canary.json, to commit as data/preflight/canary.json). Everything is logged
# to OUT_DIR/gpu_check.log; a summary of the result lines comes last. Exit status: 0 when every
# part ran and passed, else 1.
#
# Environment: PYTHON (python3), WHEELS (.whl), BUDGET_S (total seconds, 540), GPU_CHECK_ARGS
# (added to every gpu-check call: --allow-cpu rehearses the script on a CPU), GPU_TESTS (1; 0
# skips the tests).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu_check_out}}
mkdir -p "$out"
log=$out/gpu_check.log
results=$out/parts.log  # the parts' own output, complete when the summary reads it
PY=${PYTHON:-python3}
wheels=${WHEELS:-.whl}
budget=${BUDGET_S:-540}
extra=${GPU_CHECK_ARGS:-}
site=${TMPDIR:-/tmp}/lbsolver-site
export PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-${TMPDIR:-/tmp}/lbsolver-jax-cache}
summary=()

left() { echo $((budget - SECONDS)); }

# part NAME LIMIT COMMAND...: run COMMAND under min(LIMIT, what is left of the budget); a
# COMMAND of gpu-check is `python -m solver.bench gpu-check` with GPU_CHECK_ARGS
part() {
    local name=$1 limit=$2 status
    shift 2
    local remaining
    remaining=$(left)
    if [ "$remaining" -lt 30 ]; then
        summary+=("$(printf '%-12s skipped (budget spent)' "$name")")
        return
    fi
    [ "$limit" -gt $((remaining - 10)) ] && limit=$((remaining - 10))
    if [ "$1" = gpu-check ]; then
        shift
        # shellcheck disable=SC2086  # GPU_CHECK_ARGS is a list of options
        set -- "$PY" -m solver.bench gpu-check "$@" $extra
    fi
    echo "== $name (limit ${limit} s): $*"
    local began=$SECONDS
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$results"
    status=${PIPESTATUS[0]}
    local took=$((SECONDS - began)) verdict
    case $status in
        0) verdict=ok ;;
        124 | 137) verdict="TIMED OUT" ;;
        *) verdict="exit $status" ;;
    esac
    echo "== $name: $verdict after ${took} s"
    summary+=("$(printf '%-12s %-10s %4d s' "$name" "$verdict" "$took")")
}

main() {
    : >"$results"
    echo "gpu_check_offline: $(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    if command -v nvidia-smi >/dev/null; then
        # read-only queries: the card is measured as it is found
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
            --format=csv
    fi
    if compgen -G "$wheels/*.whl" >/dev/null; then
        "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$site" "$wheels"/*.whl || { echo "installing $wheels/*.whl failed"; return 1; }
    else
        echo "no wheels in $wheels (make gpu-wheels, then carry $wheels): using the Python as it is"
    fi
    export PYTHONPATH=$PWD:$site${PYTHONPATH:+:$PYTHONPATH}
    # the CUDA kernel (fluid.kernel=cuda) is compiled here by nvcc for this GPU, and its
    # agreement checks and tests run the native CPU kernel on the host: the libraries of both
    # that gpu-check and tests/test_cuda_kernel.py use, built now in the background while the
    # first part measures (the architecture from nvidia-smi, so that the builder does
    # not open the GPU: a second JAX process would preallocate its memory)
    if [ -z "${SOLVER_CUDA_ARCH:-}" ] && command -v nvidia-smi >/dev/null; then
        cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
        [ -n "$cap" ] && export SOLVER_CUDA_ARCH=sm_${cap//./}
    fi
    echo "CUDA kernel: nvcc $(command -v nvcc || echo 'not found'), arch ${SOLVER_CUDA_ARCH:-from JAX}"
    libraries="D3Q19:float32 D3Q19:float16 D3Q27:float32 D3Q27:float16 D2Q9:float64 D2Q9:float32
        D2Q9:float16"
    # shellcheck disable=SC2086  # a list of LATTICE:STORAGE
    (export XLA_PYTHON_CLIENT_PREALLOCATE=false
     "$PY" -m solver.fluid.cuda $libraries >"$out/build_cuda.log" 2>&1
     "$PY" -m solver.fluid.native $libraries >"$out/build_native.log" 2>&1) &
    "$PY" -c "import sys, jax, numpy, hydra, omegaconf; \
print('python', sys.version.split()[0], '| jax', jax.__version__, '| numpy', numpy.__version__, \
'| backend', jax.default_backend(), '|', jax.devices())" || { echo "imports failed"; return 1; }

    # the issue's headline (D3Q19, float32 and 16-bit storage, both kernels, the largest cube),
    # then the agreement with the CPU and determinism, then D3Q27 and bfloat16
    part headline 240 gpu-check --lattices D3Q19 --storages float32,float16 --parts throughput
    part agreement 150 gpu-check --lattices D3Q19 --parts agreement,determinism
    part d3q27 180 gpu-check --lattices D3Q27 --storages float32,float16 --parts throughput,agreement
    part bfloat16 120 gpu-check --storages bfloat16 --parts throughput
    part tuning 60 gpu-check --kernels cuda --parts tuning
    if [ "$("$PY" -c 'import jax; print(len(jax.devices()))')" -ge 2 ]; then
        part scaling 240 gpu-check --parts scaling
    fi
    if [ "${GPU_TESTS:-1}" = 1 ]; then
        # the kernel against the XLA step on the same device (tests/conftest.py keeps a
        # JAX_PLATFORMS that is set; the CPU stays visible for the host references)
        part tests 150 env JAX_PLATFORMS="${JAX_PLATFORMS:-cuda,cpu}" "$PY" -m pytest -q \
            -p no:cacheprovider -m "not slurm" -o addopts="" tests/test_pallas_kernel.py \
            tests/test_cuda_kernel.py -k "equals or compose or lowers or nvcc"
    fi
    # last, the preflight's GPU path (CUDA runtime, cuDNN, NCCL and driver versions, the device,
    # the numerical canary: no checksum is stored for a GPU yet, so it warns), then this GPU's
    # canary checksums, recorded into the node's data/preflight/canary.json and copied to OUT
    part preflight 90 "$PY" -m solver.preflight --out "$out/preflight" --allow-untested
    part canaries 90 bash -c 'for lattice in d2q9 d3q19 d3q27; do
        "$1" -m solver.preflight --record-canary case=taylor_green fluid=$lattice || exit 1; done
        cp data/preflight/canary.json "$2/canary.json"' _ "$PY" "$out"

    echo
    echo "summary ($SECONDS s of a ${budget} s budget; the whole log: $log)"
    grep -E "^(device:|cuda:|copy bandwidth|  D3Q|determinism|pallas on 2|  the probe)" "$results" |
        awk '!seen[$0]++' || true
    printf '%s\n' "${summary[@]}"
    for line in "${summary[@]}"; do
        case $line in *" ok "*) ;; *) return 1 ;; esac
    done
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
