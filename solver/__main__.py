"""Entry point of ``python -m solver``; see solver.app."""

from solver.app import main

main()
