# Body shared by the sbatch templates: sourced (not run) by the batch shell, with the overrides of
# `sbatch TEMPLATE OVERRIDE...` as its arguments. It sets the environment of a JAX + MPI job,
# starts one solver process per task with `srun --mpi=pmix`, and turns Slurm's warning signal
# (USR1, `--signal=B:USR1@120`) into a forwarded USR1 for the solver and a requeue of the job.
#
# Variables it honours (all optional; export them before `sbatch`, which passes the environment on):
#   SOLVER_PYTHON         python to run (default: $SOLVER_ROOT/.venv/bin/python if present,
#                         else `python` from PATH)
#   SOLVER_GPUS_PER_NODE  GPUs per node (default: from the allocation, SLURM_GPUS_PER_NODE or
#                         SLURM_GPUS_ON_NODE). With 0 the run is on CPU: JAX_PLATFORMS
#                         defaults to cpu.
#   SOLVER_RUN_DIR        Hydra run directory (default: outputs/${SLURM_JOB_NAME}_${SLURM_JOB_ID},
#                         relative to the submit directory; the same after a requeue)
#   SOLVER_MAX_REQUEUES   how often the job may requeue itself after the solver stopped with a
#                         checkpoint (exit code 75: time-limit warning, scancel --signal=USR1 or
#                         TERM to the steps); default 5, 0 turns it off. The requeued job runs in
#                         the same run dir and resumes from the newest checkpoint by itself.
#   PREFLIGHT             1 (default): run `python -m solver.preflight` with the same overrides
#                         on every task before the solver (report in <run dir>/preflight/); a
#                         failing preflight stops the job with its exit code (20 versions,
#                         21 canary, 22 slow link or storage, 2 configuration) and no requeue.
#                         0: skip it.
#   PREFLIGHT_ARGS        extra options for the preflight, e.g. "--allow-untested
#                         --storage-mib 1024" (python -m solver.preflight --help)
#   SOLVER_CACHE_DIR      a directory on the shared filesystem for JAX's persistent compilation
#                         cache, shared by every job that names it (default: <run dir>/jax_cache,
#                         shared by the requeues of this job); JAX_COMPILATION_CACHE_DIR, if
#                         set, wins. SOLVER_JAX_CACHE=0 turns the cache off.

set -euo pipefail

: "${SOLVER_ROOT:=${SLURM_SUBMIT_DIR:-$PWD}}"
if [[ -z "${SOLVER_PYTHON:-}" ]]; then
    if [[ -x "$SOLVER_ROOT/.venv/bin/python" ]]; then
        SOLVER_PYTHON="$SOLVER_ROOT/.venv/bin/python"
    else
        SOLVER_PYTHON=python
    fi
fi
# GPUs per node as asked for (--gpus-per-node, which may carry a type: "h100:4"), or as granted
# (--gres); empty when unknown, and then JAX finds the devices by itself.
gpus_per_node="${SOLVER_GPUS_PER_NODE:-${SLURM_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}}"
gpus_per_node="${gpus_per_node##*:}"
tasks_per_node="${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE%%(*}}"
run_dir="${SOLVER_RUN_DIR:-outputs/${SLURM_JOB_NAME}_${SLURM_JOB_ID}}"
max_requeues="${SOLVER_MAX_REQUEUES:-5}"

# One task per GPU: every task sees all GPUs of its node and JAX's Slurm detection gives task
# SLURM_LOCALID the GPU of the same index, so the counts must agree.
if [[ -n "$gpus_per_node" && "$gpus_per_node" != 0 && "$tasks_per_node" != "$gpus_per_node" ]]
then
    echo "solver_job: ${tasks_per_node} tasks per node but ${gpus_per_node} GPUs per node;" \
        "set --ntasks-per-node equal to --gpus-per-node (one task per GPU)" >&2
    exit 2
fi
if [[ "$gpus_per_node" == 0 ]]; then
    export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
fi

# --- JAX on GPU -------------------------------------------------------------------------------
# JAX reserves 75% of each GPU's memory at start. One process per GPU makes that safe; lower the
# fraction if MPI/UCX or NCCL need device memory of their own (out-of-memory at the first halo
# exchange), or set XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand (slower).
# export XLA_PYTHON_CLIENT_MEM_FRACTION=0.70
# export XLA_PYTHON_CLIENT_PREALLOCATE=false

# --- NCCL (GPU collectives of domain.halo=xla) -------------------------------------------------
# Under halo=xla the halo exchange between processes, and the small host agreements between
# chunks, are XLA collectives: NCCL on GPUs. Under halo=mpi nothing needs NCCL: the halos go
# through MPI and Orbax's checkpoint barriers through jax.distributed's key-value store
# (docs/checkpoints.md). If the first collective hangs or fails, ask NCCL what it does:
# export NCCL_DEBUG=INFO               # version, transports, rings in the job log (WARN: problems)
# export NCCL_DEBUG_SUBSYS=INIT,NET    # with INFO: just the start-up and network lines
# NCCL picks the network interface for its bootstrap (and socket transport) itself; on nodes with
# several (ib0, eno1, docker0, ...) it may pick one that does not reach the other nodes: hang.
# Name the interface of the fast network, or exclude the wrong ones with ^:
# export NCCL_SOCKET_IFNAME=ib0        # or e.g. hsn0 (Slingshot), or ^lo,docker0
# export NCCL_IB_HCA=mlx5              # which InfiniBand adapters NCCL may use

# --- MPI (domain.halo=mpi) --------------------------------------------------------------------
# mpi4jax sends device buffers directly only with a CUDA-aware MPI; check with
#   ompi_info --parsable --all | grep mpi_built_with_cuda_support:value
# and then set MPI4JAX_USE_CUDA_MPI=1. Otherwise halos are staged through host memory.
# export MPI4JAX_USE_CUDA_MPI=1
# Open MPI over UCX (InfiniBand, NVLink) on most GPU clusters:
# export OMPI_MCA_pml=ucx
# export UCX_TLS=rc,sm,cuda_copy,cuda_ipc,gdr_copy
# export UCX_RNDV_THRESH=8192
# Open MPI as root (containers) refuses to start unless told:
# export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

srun_args=(--mpi=pmix --kill-on-bad-exit=1)
# Since Slurm 22.05 srun no longer inherits --cpus-per-task from the allocation.
if [[ -n "${SLURM_CPUS_PER_TASK:-}" ]]; then
    srun_args+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
fi

echo "solver_job: job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0})" \
    "on ${SLURM_JOB_NODELIST}: ${SLURM_NTASKS} tasks, ${gpus_per_node:-?} GPUs per node," \
    "run dir ${run_dir}"

EXIT_PREEMPTED=75  # the solver stopped on a signal after writing a checkpoint

# A run.json newer than this file was written by this run (stopped_with_checkpoint). In the run
# dir, so that both time stamps come from the same filesystem.
mkdir -p "$run_dir"
run_started="${run_dir}/.solver_job_started"
touch "$run_started"

# --- JAX's persistent compilation cache -------------------------------------------------------
# Compiled programs (one per chunk length, and the small ones around it) go to a directory on the
# shared filesystem, so that a requeued job, and the next job of the same case, grid, mesh and
# chunk length, load them instead of compiling again (minutes for a large 3D chunk on GPUs). The
# key is the optimised program with its compile options, devices and jax/jaxlib versions, so a
# hit is the same executable: results are unchanged. Process 0 writes entries, all read them.
# Programs that compile in under JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS (1 s) are not kept:
# the chunks are, not the many small programs that each would be a file on the shared filesystem.
# JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES 0: no size limit (-1 also stops JAX from raising it
# for some filesystems). JAX also keeps XLA's GPU autotuning results there.
if [[ "${SOLVER_JAX_CACHE:-1}" != 0 ]]; then
    jax_cache="${JAX_COMPILATION_CACHE_DIR:-${SOLVER_CACHE_DIR:+${SOLVER_CACHE_DIR}/jax}}"
    jax_cache="${jax_cache:-${run_dir}/jax_cache}"
    mkdir -p "$jax_cache"
    JAX_COMPILATION_CACHE_DIR="$(cd "$jax_cache" && pwd)"  # absolute, wherever a task starts
    export JAX_COMPILATION_CACHE_DIR
    : "${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:=1}"
    : "${JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES:=0}"
    export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES
    echo "solver_job: JAX compilation cache in ${JAX_COMPILATION_CACHE_DIR}"
fi

# Whether the solver stopped with a checkpoint. srun exits with 75 when every task did. But as
# soon as the first task exits with 75, srun (--kill-on-bad-exit) terminates the others: one that
# is still exiting then ends by SIGTERM and srun reports 143. Process 0 writes run.json with
# status "preempted" after the checkpoint and before it exits, so this run's run.json decides.
stopped_with_checkpoint() {
    ((status == EXIT_PREEMPTED)) && return 0
    local summary="${run_dir}/run.json"
    [[ -f "$summary" && "$summary" -nt "$run_started" ]] &&
        grep -q '"status": *"preempted"' "$summary"
}

# --- Preflight: versions, collectives, links, numerics and checkpoint storage of this job -----
if [[ "${PREFLIGHT:-1}" != 0 ]]; then
    preflight_dir="${run_dir}/preflight"
    read -r -a preflight_args <<<"${PREFLIGHT_ARGS:-}"
    preflight_status=0
    srun "${srun_args[@]}" "$SOLVER_PYTHON" -m solver.preflight --out "$preflight_dir" \
        "${preflight_args[@]}" "hydra.run.dir=${run_dir}" "$@" || preflight_status=$?
    if ((preflight_status != 0)); then
        # srun may report a task ended by --kill-on-bad-exit (143); this run's report holds
        # the code
        reported=""
        if [[ "${preflight_dir}/preflight.json" -nt "$run_started" ]]; then
            reported=$(grep -o '"exit_code": *[0-9]*' "${preflight_dir}/preflight.json" |
                grep -o '[0-9]*$' || true)
        fi
        preflight_status="${reported:-$preflight_status}"
        echo "solver_job: preflight failed (exit status ${preflight_status}, report in" \
            "${preflight_dir}/); the solver does not run and the job is not requeued" >&2
        exit "$preflight_status"
    fi
fi

warned=0
on_warning() {
    warned=1
    echo "solver_job: time limit near (USR1); asking the solver to checkpoint and stop" >&2
    kill -USR1 "$solver_pid" 2>/dev/null || true
}
trap on_warning USR1

# In the background, so that the batch shell runs its trap as soon as the signal arrives.
srun "${srun_args[@]}" "$SOLVER_PYTHON" -m solver "hydra.run.dir=${run_dir}" "$@" &
solver_pid=$!
status=0
wait "$solver_pid" || status=$?
# A trapped signal interrupts `wait` (status > 128) while the solver runs on to its checkpoint:
# wait again for its own exit status. (The time limit bounds this: --signal=B:USR1@120 leaves
# the solver 120 s for its chunk and the save.)
while ((warned)) && kill -0 "$solver_pid" 2>/dev/null; do
    status=0
    wait "$solver_pid" || status=$?
done
if stopped_with_checkpoint; then
    if ((${SLURM_RESTART_COUNT:-0} < max_requeues)); then
        echo "solver_job: solver stopped with a checkpoint (srun exit status ${status});" \
            "requeueing job ${SLURM_JOB_ID}" \
            "(restart $((${SLURM_RESTART_COUNT:-0} + 1)) of at most ${max_requeues})" >&2
        scontrol requeue "$SLURM_JOB_ID"
    else
        echo "solver_job: solver stopped with a checkpoint; not requeued" \
            "(SOLVER_MAX_REQUEUES=${max_requeues} reached): resubmit to continue" >&2
    fi
fi
exit "$status"
