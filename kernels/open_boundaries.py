"""Link-wise and convective open boundaries: the incoming populations of a face node.

Notation as in kernels/boundaries.py: after streaming f_i(x_b) = f_i*(x_b - c_i); on a face node
x_b the populations whose upstream node lies outside the box (``incoming``: c_i pointing into the
box) are unknown and replaced here; j = opposite(i) points out of the box. All arrays are face
slices (extent 1 along the face normal).

- Velocity bounce-back (Ladd 1994, J. Fluid Mech. 271, 285; Kruger et al. 2017, The Lattice
  Boltzmann Method, sec. 5.3.3): the wall half a cell outside x_b moves with u_w,
      f_i(x_b, t) = f_j*(x_b, t-1) + 2 w_i rho_w (c_i . u_w) / c_s^2.
- Anti-bounce-back pressure (Kruger et al. 2017, sec. 5.3.4, eq. 5.62; Izquierdo & Fueyo 2008):
  the density rho_w half a cell outside x_b,
      f_i(x_b, t) = -f_j*(x_b, t-1) + 2 w_i rho_w [1 + (c_i.u_w)^2 / (2 c_s^4) - u_w^2 / (2 c_s^2)],
  u_w = u(x_b) + (u(x_b) - u(x_b - n)) / 2 extrapolated from the face and the plane inside.
- Convective outflow (Yang 2013, Phys. Rev. E 88, 033305; Lou, Guo & Shi 2013, Phys. Rev. E 87,
  063301), df/dt + U df/dn = 0 discretised implicitly,
      f_i(x_b, t) = [f_i(x_b, t-1) + U f_i(x_b - n, t)] / (1 + U),
  U the local outward normal velocity at x_b - n clipped to [0, 1]: vortices and pressure waves
  are carried out of the box instead of being reflected by a prescribed density. Alone it fixes
  no pressure level, and the mass pushed in while an inflow starts stays in the box (a 16 %
  higher density, and drag, was measured on the cylinder); as in the partially non-reflecting
  characteristic conditions (Poinsot & Lele 1992, J. Comput. Phys. 101, 104: K = sigma c / L),
  the face density is relaxed towards rho_out at the slow rate kappa per step,
      f_i <- f_i + kappa [f_i^eq(rho_out, u_b) - f_i^eq(rho_b, u_b)],
  slow enough for acoustic waves shorter than ~1/kappa steps to pass.
- Characteristic outflow (Thompson 1987, J. Comput. Phys. 68, 1; Poinsot & Lele 1992; in lattice
  Boltzmann form Izquierdo & Fueyo 2008, Phys. Rev. E 78, 046707): the convective outlet
  advects the populations at the flow speed U, but a sound wave leaves at U + c_s, so its
  incoming populations answer the wave and part of it returns. Here the face's normal velocity
  u_n is carried out at u_n + c_s (the outgoing acoustic wave, implicit upwind as above) and
  its density follows from the incoming acoustic invariant W_in = c_s rho' - u_n
  (rho' = rho - rho_out) held constant, so that the face reflects no sound; W_in is relaxed as
  Poinsot & Lele's L1 = K (p - p_out), dW_in/dt = -K c_s rho', so that the mean density returns
  to rho_out:
      u_n(x_b, t) = [u_n(x_b, t-1) + s u_n(x_b - n, t)] / (1 + s),   s = u_n + c_s,
      rho(x_b, t) = rho(x_b, t-1) + [u_n(x_b, t) - u_n(x_b, t-1)] / c_s - K rho'(x_b, t-1).
  Carrying u_n rather than the outgoing invariant c_s rho' + u_n keeps a steady channel flow
  exact: its viscous pressure gradient would otherwise enter the face velocity (0.3 % too much
  outflow, measured). The tangential velocity is advected at u_n; the face's populations are
  the equilibrium at (rho_b, u_b) plus the regularized non-equilibrium part of the plane inside
  (as the pressure outlet).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jax import Array

from kernels.boundaries import nonequilibrium_extrapolation
from kernels.equilibrium import Populations, density_velocity, equilibrium, project
from kernels.lattices import CS2, Lattice


def velocity_bounce_back(
    lattice: Lattice,
    streamed: Populations,
    post_collision: Populations,
    incoming: Sequence[int],
    density: Array,
    velocity: Sequence[Array],
) -> list[Array]:
    """Link-wise velocity inlet, q arrays (*face) out.

    Args:
        streamed: q arrays (*face), f_i(x_b, t) after streaming (kept for the other directions).
        post_collision: q arrays (*face), f_i*(x_b, t-1).
        incoming: the directions entering the box through the face.
        density: (*face) rho_w (the face node's density).
        velocity: d arrays (*face), u_w on the face.
    """
    out = list(streamed)
    for i in incoming:
        j = int(lattice.opposite[i])
        cu = project(lattice, i, velocity)
        out[i] = post_collision[j] + (2.0 * float(lattice.w[i]) / CS2) * density * cu
    return out


def pressure_anti_bounce_back(
    lattice: Lattice,
    streamed: Populations,
    post_face: Populations,
    post_inner: Populations,
    incoming: Sequence[int],
    density: float,
) -> list[Array]:
    """Link-wise pressure outlet, q arrays (*face) out.

    Args:
        streamed: q arrays (*face), f_i(x_b, t) after streaming.
        post_face, post_inner: q arrays (*face), f_i*(t-1) on the face and one plane inside
            (their velocities give u_w by linear extrapolation).
        incoming: the directions entering the box through the face.
        density: rho_w, the prescribed density.
    """
    _, u_face = density_velocity(lattice, post_face)
    _, u_inner = density_velocity(lattice, post_inner)
    u_wall = [1.5 * a - 0.5 * b for a, b in zip(u_face, u_inner, strict=True)]
    usq = sum(u * u for u in u_wall)
    out = list(streamed)
    for i in incoming:
        j = int(lattice.opposite[i])
        cu = project(lattice, j, u_wall)
        even = 1.0 + cu * cu * (0.5 / CS2**2) - usq * (0.5 / CS2)
        out[i] = -post_face[j] + 2.0 * float(lattice.w[i]) * density * even
    return out


def convective_outflow(
    lattice: Lattice,
    streamed: Populations,
    previous: Populations,
    inner: Populations,
    incoming: Sequence[int],
    axis: int,
    outward: float,
    density: float,
    relaxation: float,
) -> list[Array]:
    """Convective outlet with a slowly relaxed density level, q arrays (*face) out.

    Args:
        streamed: q arrays (*face), f_i(x_b, t) after streaming.
        previous: q arrays (*face), f_i(x_b, t-1), the face's populations one step earlier.
        inner: q arrays (*face), f_i(x_b - n, t) one plane inside (streamed and walled).
        incoming: the directions entering the box through the face.
        axis: the face normal's axis; outward: +1 on a high face, -1 on a low face.
        density: rho_out, the level the face density relaxes to.
        relaxation: kappa, the fraction of the density error removed per step (0: none).
    """
    _, u = density_velocity(lattice, inner)
    speed = jnp.clip(outward * u[axis], 0.0, 1.0)
    weight = 1.0 / (1.0 + speed)
    out = list(streamed)
    for i in incoming:
        out[i] = (previous[i] + speed * inner[i]) * weight
    if relaxation > 0.0:
        rho_b, u_b = density_velocity(lattice, out)
        target = equilibrium(lattice, density + 0.0 * rho_b, u_b)
        actual = equilibrium(lattice, rho_b, u_b)
        for i in incoming:
            out[i] = out[i] + relaxation * (target[i] - actual[i])
    return out


def characteristic_outflow(
    lattice: Lattice,
    previous: Populations,
    inner: Populations,
    axis: int,
    outward: float,
    density: float,
    relaxation: float,
) -> tuple[Array, ...]:
    """Non-reflecting characteristic outlet, q arrays (*face) out (all q replaced).

    Args:
        previous: q arrays (*face), f_i(x_b, t-1), the face's populations one step earlier.
        inner: q arrays (*face), f_i(x_b - n, t) one plane inside (streamed and walled).
        axis: the face normal's axis; outward: +1 on a high face, -1 on a low face.
        density: rho_out, the level the face density relaxes to.
        relaxation: K, the rate (per step) at which the incoming invariant pulls the face
            density back to rho_out (0: perfectly non-reflecting for plane waves, no level).
    """
    c = CS2**0.5
    rho_p, u_p = density_velocity(lattice, previous)
    _, u_i = density_velocity(lattice, inner)
    normal_p, normal_i = outward * u_p[axis], outward * u_i[axis]
    # the outgoing wave: u_n carried out at u_n + c_s, upwind and implicit in time as the
    # convective outlet (stable for any speed), u_b(t) = [u_b(t-1) + s u_inner(t)] / (1 + s)
    speed = jnp.clip(normal_i + c, 0.0, 1.0)
    normal_b = (normal_p + speed * normal_i) / (1.0 + speed)
    # the incoming invariant held: c_s d(rho') = d(u_n), less the relaxation K c_s rho'
    rho_b = rho_p + (normal_b - normal_p) / c - relaxation * (rho_p - density)
    flow = jnp.clip(normal_i, 0.0, 1.0)
    u_b = [(u_p[a] + flow * u_i[a]) / (1.0 + flow) for a in range(lattice.d)]
    u_b[axis] = outward * normal_b
    return nonequilibrium_extrapolation(lattice, inner, density=rho_b, velocity=u_b)
