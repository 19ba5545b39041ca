"""Benchmarks: `python -m solver.bench [fluid|scaling|bodies|twin|checkpoint]`."""
