"""Preflight: is this job's software, hardware and storage fit to run the solver?

``python -m solver.preflight [OPTIONS] [OVERRIDE ...]`` runs on every process of a job (the
sbatch templates run it before the solver unless ``PREFLIGHT=0``). Process 0 gathers what every
process reports, checks it, prints a table and writes a JSON report. See docs/cluster.md.

Exit codes (the same on every process):

- 0: every check passed (warnings allowed).
- 2: a bad configuration or command line (one line on stderr), as ``python -m solver``.
- 20 (``EXIT_VERSIONS``): package, Python, MPI or CUDA versions differ across processes, or a
  version or combination outside the compatibility matrix (data/compatibility.json), or
  different device kinds or counts across processes.
- 21 (``EXIT_CANARY``): a canary computed a wrong result: a collective (all-reduce, ppermute
  ring, link exchange) delivered wrong data, or the numerical canary of a process differs from
  the 1-device reference (or the reference from the stored checksum).
- 22 (``EXIT_SLOW``): a link or the checkpoint storage is slower than the baseline
  (data/preflight/baseline.json).

When several fail, the code of the first in this order is returned (versions, canary, slow);
the report lists every failure.
"""

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_VERSIONS = 20
EXIT_CANARY = 21
EXIT_SLOW = 22
EXIT_CODES = {
    "versions": EXIT_VERSIONS,
    "canary": EXIT_CANARY,
    "slow": EXIT_SLOW,
}
