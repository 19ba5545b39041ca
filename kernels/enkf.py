"""The stochastic ensemble Kalman filter analysis with localisation and inflation.

For E members x_e (n,) with predicted observations H(x_e) (P,), observations y (P,) with
independent errors of standard deviation sigma (P,), the analysis (Evensen 1994; perturbed
observations after Burgers, van Leeuwen & Evensen 1998, Mon. Wea. Rev. 126, 1719) is

    x_e <- x_e + K (y + sigma * eps_e - H(x_e)),
    K = (rho_xy o C_xy) (rho_yy o C_yy + R)^-1,

with the ensemble covariances C_xy = A (HA)^T / (E - 1), C_yy = HA (HA)^T / (E - 1), A and HA
the anomalies (members minus their mean), R = diag(sigma^2), and o the element-wise (Schur)
product with localisation weights rho (covariance localisation, Houtekamer & Mitchell 2001,
Mon. Wea. Rev. 129, 123). Before the analysis the anomalies are inflated by a factor lambda >= 1
(multiplicative inflation, Anderson & Anderson 1999, Mon. Wea. Rev. 127, 2741).
Parameters are estimated by state augmentation: append them to x (their localisation weight 1).
Localisation weights come from the Gaspari-Cohn function (Gaspari & Cohn 1999, Q. J. R.
Meteorol. Soc. 125, 723, eq. 4.10).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array


def gaspari_cohn(distance: Array, half_width: float) -> Array:
    """The fifth-order piecewise rational correlation of compact support 2 * half_width.

    Args:
        distance: any shape, same length unit as half_width (> 0).
    Returns:
        weights in [0, 1], 1 at distance 0 and 0 from 2 * half_width on.
    """
    z = jnp.abs(distance) / half_width
    near = -0.25 * z**5 + 0.5 * z**4 + 0.625 * z**3 - 5.0 / 3.0 * z**2 + 1.0
    safe = jnp.where(z > 0, z, 1.0)
    far = (
        z**5 / 12.0 - 0.5 * z**4 + 0.625 * z**3 + 5.0 / 3.0 * z**2 - 5.0 * z + 4.0
        - 2.0 / (3.0 * safe)
    )  # fmt: skip
    return jnp.where(z <= 1.0, near, jnp.where(z < 2.0, far, 0.0))


def inflate(states: Array, factor: float | Array) -> Array:
    """Members (E, n) with their anomalies about the mean scaled by ``factor``."""
    mean = jnp.mean(states, axis=0, keepdims=True)
    return mean + factor * (states - mean)


def analysis(
    states: Array,
    predicted: Array,
    observations: Array,
    sigma: Array,
    noise: Array,
    state_localisation: Array | None = None,
    obs_localisation: Array | None = None,
) -> Array:
    """The analysed members.

    Args:
        states: (E, n) forecast members (already inflated).
        predicted: (E, P) H applied to each member.
        observations: (P,) y.
        sigma: (P,) observation error standard deviations (> 0).
        noise: (E, P) standard normal draws for the perturbed observations.
        state_localisation: (n, P) weights rho_xy, or None (no localisation).
        obs_localisation: (P, P) weights rho_yy, or None.
    Returns:
        (E, n) analysis members.
    """
    members = states.shape[0]
    anomalies = states - jnp.mean(states, axis=0, keepdims=True)  # (E, n)
    predicted_anomalies = predicted - jnp.mean(predicted, axis=0, keepdims=True)  # (E, P)
    c_xy = anomalies.T @ predicted_anomalies / (members - 1)  # (n, P)
    c_yy = predicted_anomalies.T @ predicted_anomalies / (members - 1)  # (P, P)
    if state_localisation is not None:
        c_xy = c_xy * state_localisation
    if obs_localisation is not None:
        c_yy = c_yy * obs_localisation
    innovations = observations[None, :] + sigma[None, :] * noise - predicted  # (E, P)
    system = c_yy + jnp.diag(sigma**2)
    # K d_e = C_xy (system^-1 d_e): solve once for all members
    weights = jnp.linalg.solve(system, innovations.T)  # (P, E)
    return states + (c_xy @ weights).T
