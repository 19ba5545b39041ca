"""Everything that knows about devices and processes: decomposition, halos, runtime start-up,
sharded placement, gathering and global reductions. Kernels never import it."""
