"""Shared test settings: float64 available for exactness checks; CPU only (no GPU here)."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
