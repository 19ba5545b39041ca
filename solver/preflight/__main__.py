"""``python -m solver.preflight``; see solver/preflight/cli.py and docs/cluster.md."""

import sys

from solver.preflight.cli import main

sys.exit(main())
