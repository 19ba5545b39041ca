"""Storage formats of the populations: what is kept in memory, and how it becomes f again.

The step computes in its compute dtype (float32 or float64) and may keep the populations in a
narrower storage dtype between steps. A 16-bit format stores the populations shifted by their
lattice weight and scaled (the FP16S idea of FluidX3D: Lehmann et al. 2022, "Accuracy and
performance of the lattice Boltzmann method with 64-bit, 32-bit, and customized 16-bit number
formats", Phys. Rev. E 106, 015308; the shift is their "DDF-shifting"):

    stored_i = (f_i - w_i) * s        (rounded to nearest, ties to even, into the storage dtype)
    f_i      = stored_i / s + w_i     (in the compute dtype)

f_i - w_i is the part of f_i that carries the flow: at rest and unit density it is zero, in a
flow at lattice velocity u it is w_i (delta rho + 3 c_i.u + ...) ~ 1e-3..1e-1, so the format's
relative precision applies to that part instead of to f_i ~ w_i, which gains the ratio
|f_i - w_i| / f_i (10-1000x) in absolute accuracy.

The scale s (``SCALES``) is a power of two, so multiplying and dividing by it is exact and the
round trip is deterministic under any fusion or FMA contraction. IEEE float16 (11 significant
bits, largest finite 65504, smallest normal 2^-14):
    s = 2^15 puts |f_i - w_i| < 65504 / 2^15 = 1.999 in range (overflow to inf above: the
    health check reports it), about 4x the largest |f_i - w_i| of a stable run at lattice Mach
    <= 0.3 (w_i |3 c_i.u + 4.5 (c_i.u)^2| + w_i |delta rho| < 0.5);
    values below 2^-14 / 2^15 = 2^-29 = 1.9e-9 would be subnormal (fewer significant bits), but
    2^-29 is the spacing of float32 numbers f in [1/64, 1/32), where the smallest D2Q9/D3Q19
    weight 1/36 lies: what float16 stores subnormally, the float32 f it decodes to cannot hold.
    A larger s would gain nothing and halve the headroom per factor two.
bfloat16 (8 significant bits) has the exponent range of float32, so no scale can improve its
range use: s = 1 (the shift alone).

Unit roundoff (half the spacing relative to the value) of a format: 2^-11 for float16, 2^-8 for
bfloat16, 2^-24 for float32. One round trip errs by at most
    |decode(encode(f)) - f| <= u_storage |f - w| + u_compute (|f - w| + |f|) + tiny / s
(``round_trip_bound``; tiny = the smallest subnormal's half spacing, 2^-25 for float16).
When the storage dtype is the compute dtype nothing is shifted or scaled: the populations are
kept as they are (bitwise the plain solver).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

# storage dtype -> the power-of-two scale s applied to f - w (16-bit formats only)
SCALES: dict[str, float] = {"float16": 2.0**15, "bfloat16": 1.0}
# the 16-bit formats, which need float32 compute
SHIFTED = tuple(SCALES)
STORAGES = ("float32", "float64", *SHIFTED)


def is_shifted(storage: str, compute: str) -> bool:
    """Whether populations are stored as (f - w) * s (a 16-bit storage), not as f."""
    return storage != compute and storage in SCALES


def unit_roundoff(dtype: str) -> float:
    """Half the relative spacing of a float format: 2^-p for p significant bits."""
    return float(jnp.finfo(jnp.dtype(dtype)).eps) / 2.0


def encode(f: Array, weight: float, storage: str, compute: str) -> Array:
    """Stored form of one direction's populations f (*shape), compute dtype -> storage dtype.

    (f - w) * s rounded into a 16-bit ``storage``; f unchanged (cast) when ``storage`` is
    ``compute``.
    """
    if not is_shifted(storage, compute):
        return f.astype(storage)
    scale = SCALES[storage]
    shifted = f - jnp.asarray(weight, compute)
    if scale != 1.0:
        shifted = shifted * jnp.asarray(scale, compute)
    return shifted.astype(storage)


def decode(stored: Array, weight: float, storage: str, compute: str) -> Array:
    """Populations f (*shape) in ``compute`` of one direction's stored values (*shape)."""
    if not is_shifted(storage, compute):
        return stored.astype(compute)
    scale = SCALES[storage]
    f = stored.astype(compute)
    if scale != 1.0:
        f = f * jnp.asarray(1.0 / scale, compute)  # exact: s is a power of two
    return f + jnp.asarray(weight, compute)


def bfloat16_bits(x: Array) -> Array:
    """float32 (*shape) -> uint16 (*shape): the bit pattern of x rounded to bfloat16 (nearest,
    ties to even), by integer arithmetic on the upper 16 bits.

    Equal to ``x.astype(bfloat16)`` for every finite x and for infinities; a NaN stays a NaN or
    becomes an infinity (non-finite either way). Cheap elementwise integer work that XLA fuses
    into every consumer, where XLA:CPU's float32 -> bfloat16 conversion is materialised once
    per array (it has no bfloat16 arithmetic).
    """
    bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    rounding = jnp.uint32(0x7FFF) + ((bits >> 16) & jnp.uint32(1))
    return ((bits + rounding) >> 16).astype(jnp.uint16)


def from_bfloat16_bits(bits: Array) -> Array:
    """uint16 bit patterns of bfloat16 values (*shape) -> float32 (*shape), exactly."""
    return lax.bitcast_convert_type(bits.astype(jnp.uint32) << 16, jnp.float32)


def encode_all(f: Array, weights: np.ndarray, storage: str, compute: str) -> Array:
    """(q, *shape) populations -> (q, *shape) stored values (``encode`` per direction)."""
    if not is_shifted(storage, compute):
        return f.astype(storage)
    shape = (-1,) + (1,) * (f.ndim - 1)
    w = jnp.asarray(np.asarray(weights).reshape(shape), compute)
    shifted = f.astype(compute) - w
    if SCALES[storage] != 1.0:
        shifted = shifted * jnp.asarray(SCALES[storage], compute)
    return shifted.astype(storage)


def decode_all(stored: Array, weights: np.ndarray, storage: str, compute: str) -> Array:
    """(q, *shape) stored values -> (q, *shape) populations in ``compute``."""
    if not is_shifted(storage, compute):
        return stored.astype(compute)
    shape = (-1,) + (1,) * (stored.ndim - 1)
    w = jnp.asarray(np.asarray(weights).reshape(shape), compute)
    f = stored.astype(compute)
    if SCALES[storage] != 1.0:
        f = f * jnp.asarray(1.0 / SCALES[storage], compute)
    return f + w


def round_trip_bound(f: np.ndarray, weight: float, storage: str, compute: str) -> np.ndarray:
    """Elementwise bound on |decode(encode(f)) - f| (the module docstring's formula), for f of
    one direction (any shape), as float64."""
    f = np.asarray(f, dtype=np.float64)
    u_c = unit_roundoff(compute)
    if not is_shifted(storage, compute):
        return unit_roundoff(storage) * np.abs(f) if storage != compute else np.zeros_like(f)
    u_s = unit_roundoff(storage)
    tiny = float(jnp.finfo(jnp.dtype(storage)).smallest_subnormal) / 2.0
    delta = np.abs(f - weight)
    # the subtraction f - w and the addition of w each round once in the compute dtype
    return u_s * delta * (1.0 + 2.0 * u_c) + u_c * (delta + np.abs(f)) + tiny / SCALES[storage]
