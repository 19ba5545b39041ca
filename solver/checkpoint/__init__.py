"""Checkpoints: saving, restoring and resuming runs (Orbax), striping and preemption."""
