"""The lattice-Boltzmann fluid: set-up, step, cases, analytic solutions and units."""
