"""Bodies moving in the fluid: two-way coupled lattice-Boltzmann and rigid-body runs."""
