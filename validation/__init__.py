"""Validation of the solver against analytic solutions and published benchmarks.

Run ``python -m validation [--fast] [--out DIR] [CASE ...]``; see ``validation.__main__``.
Every case goes through the solver's public API (``solver.api.run``).
"""
