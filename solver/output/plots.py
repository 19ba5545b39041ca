"""PNG of the final state: velocity magnitude or vorticity (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def vorticity_2d(velocity: np.ndarray, dx: float) -> np.ndarray:
    """omega_z = d u_y / dx - d u_x / dy (1/s) by central differences; velocity (2, nx, ny)."""
    return np.gradient(velocity[1], dx, axis=0) - np.gradient(velocity[0], dx, axis=1)


def save_field_png(
    path: Path,
    velocity: np.ndarray,
    solid: np.ndarray | None,
    dx: float,
    origin: tuple[float, ...],
    field: str,
    title: str,
    z_index: int | None = None,
) -> Path:
    """Plot the final field; 3D fields are shown on the mid-plane z = nz / 2.

    Args:
        velocity: (d, *shape) in m/s.
        solid: (*shape) bool or None.
        field: "speed" or "vorticity".
        z_index: the grid's z index of the plane shown, when ``velocity`` holds only that
            plane (nz = 1); None: nz / 2 of the field given.
    """
    # imported here, not with the module: matplotlib takes 0.4 s to import, which every run
    # without a PNG (output.png=false, most short runs and tests) would pay for nothing
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if velocity.shape[0] == 3:
        k = velocity.shape[-1] // 2
        velocity = velocity[:2, :, :, k]
        solid = None if solid is None else solid[:, :, k]
        title += f" (mid-plane z index {k if z_index is None else z_index})"
    if field == "vorticity":
        values = vorticity_2d(velocity, dx)
        label, cmap = "vorticity (1/s)", "RdBu_r"
        fluid = values if solid is None else values[~solid]
        limit = float(np.percentile(np.abs(fluid), 99)) or 1.0
        vmin, vmax = -limit, limit
    else:
        values = np.sqrt(np.sum(velocity**2, axis=0))
        label, cmap = "velocity magnitude (m/s)", "viridis"
        vmin, vmax = 0.0, float(values.max()) or 1.0
    if solid is not None:
        values = np.ma.masked_where(solid, values)
    nx, ny = values.shape
    extent = (origin[0], origin[0] + nx * dx, origin[1], origin[1] + ny * dx)
    aspect = ny / nx
    fig, ax = plt.subplots(figsize=(10, max(2.5, min(10, 10 * aspect)) + 0.8), dpi=120)
    cm = plt.get_cmap(cmap).with_extremes(bad="0.35")  # solid nodes in grey
    image = ax.imshow(
        values.T,
        origin="lower",
        extent=extent,
        cmap=cm,
        vmin=vmin,
        vmax=vmax,
        interpolation="nearest",
    )
    fig.colorbar(image, ax=ax, label=label, shrink=0.9)
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
