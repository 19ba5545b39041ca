"""Outputs of a coupled run: the tracked bodies every step, and two pictures.

bodies_track.csv: one row per fluid step and tracked body (step, time_s, body, x, y, z, vx, vy,
vz, fx, fy, fz; SI, the hydrodynamic force without buoyancy). bodies_track.png: each tracked
body's velocity and hydrodynamic force against time (a PSM force history has no spikes when
the body crosses cells; this is where to look). slice.png: the speed on the vertical plane
y = y of the first body, with the bodies cut by that plane drawn as circles (on a 2D grid: the
whole plane, the disks drawn; y is up there).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TRACK_COLUMNS = ("step", "time_s", "body", "x", "y", "z", "vx", "vy", "vz", "fx", "fy", "fz")


class TrackLog:
    """bodies_track.csv, appended after every chunk (rows of a resumed run rewritten first)."""

    def __init__(
        self, path: Path, tracked: int, dt: float, history: np.ndarray | None = None
    ) -> None:
        self.path = Path(path)
        self.tracked, self.dt = tracked, dt
        self.path.write_text(",".join(TRACK_COLUMNS) + "\n")
        if history is not None and len(history):
            self.append(1, history)

    def append(self, first_step: int, track: np.ndarray) -> None:
        """track: (k, tracked, 9) after steps first_step, first_step + 1, ..."""
        with self.path.open("a") as f:
            for i, rows in enumerate(track):
                step = first_step + i
                for body, row in enumerate(rows):
                    values = ",".join(f"{v:.9g}" for v in row)
                    f.write(f"{step},{step * self.dt:.9g},{body},{values}\n")


def plot_track(path: Path, times: np.ndarray, track: np.ndarray, case) -> Path:
    """Vertical velocity and hydrodynamic force of the tracked bodies against time; the
    experiment's maximum settling velocity as a line where the case knows it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    up = int(case.info.get("vertical_axis", 2))  # z, or y on a 2D grid
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for body in range(track.shape[1]):
        top.plot(times, track[:, body, 3 + up], lw=1, label=f"body {body}")
        bottom.plot(times, track[:, body, 6 + up], lw=1)
    reference = case.info.get("reference_max_velocity_m_s")
    if reference is not None:
        top.axhline(-reference, color="k", ls="--", lw=1, label="experiment, max (ten Cate 2002)")
    top.set_ylabel("vertical velocity (m/s)")
    top.legend(fontsize=8, loc="best")
    bottom.set_ylabel(f"hydrodynamic force {'xyz'[up]} (N)")
    bottom.set_xlabel("t (s)")
    fig.suptitle(f"{case.name}: tracked bodies (every fluid step)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def save_slice_png(
    path: Path,
    velocity: np.ndarray,
    solid: np.ndarray | None,
    dx: float,
    origin: tuple[float, ...],
    positions: np.ndarray,
    radius: np.ndarray,
    title: str,
) -> Path:
    """Speed on the x-z plane through the first body's centre, bodies drawn where cut.

    Args:
        velocity: (3, nx, ny, nz) m/s, or (2, nx, ny) on a 2D grid (the whole x-y plane);
        solid: (nx, ny, nz) bool ((nx, ny)) or None; positions: (n, 3) m; radius: (n,) m.
    """
    if velocity.shape[0] == 2:  # the whole x-y plane, every disk drawn
        speed = np.sqrt(np.sum(velocity**2, axis=0))
        cut_solid = solid
        circles = [((x, y), r) for (x, y, _), r in zip(positions, radius, strict=True)]
        axes, label = (0, 1), title
    else:  # the x-z plane through the first body's centre, spheres drawn where cut
        y0 = float(positions[0, 1])
        j = int(np.clip(round((y0 - origin[1]) / dx - 0.5), 0, velocity.shape[2] - 1))
        speed = np.sqrt(np.sum(velocity[:, :, j, :] ** 2, axis=0))
        cut_solid = None if solid is None else solid[:, j, :]
        y_plane = origin[1] + (j + 0.5) * dx
        circles = [
            ((x, z), np.sqrt(r * r - (y - y_plane) ** 2))
            for (x, y, z), r in zip(positions, radius, strict=True)
            if r * r > (y - y_plane) ** 2
        ]
        axes, label = (0, 2), title + f"\n(plane y = {y_plane:.4g} m)"
    return _plane_png(path, speed, cut_solid, dx, [origin[a] for a in axes], axes, circles, label)


def _plane_png(
    path: Path,
    speed: np.ndarray,
    solid: np.ndarray | None,
    dx: float,
    origin: list[float],
    axes: tuple[int, int],
    circles: list,
    title: str,
) -> Path:
    """Speed (n0, n1) m/s on a plane spanned by the grid ``axes``, solid cells grey, the
    ``circles`` ((centre), radius) m drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Circle

    if solid is not None:
        speed = np.ma.masked_where(solid, speed)
    n0, n1 = speed.shape
    extent = (origin[0], origin[0] + n0 * dx, origin[1], origin[1] + n1 * dx)
    size = (6, 6 * n1 / n0 + 0.5) if axes == (0, 2) else (3 + 6 * n0 / n1, 7)
    fig, ax = plt.subplots(figsize=size, dpi=110)
    cmap = plt.get_cmap("viridis").with_extremes(bad="0.35")
    image = ax.imshow(speed.T, origin="lower", extent=extent, cmap=cmap, interpolation="nearest")
    fig.colorbar(image, ax=ax, label="speed (m/s)", shrink=0.8)
    for centre, r in circles:
        ax.add_patch(Circle(centre, r, fill=False, color="w", lw=1.2))
    ax.set_xlabel(f"{'xyz'[axes[0]]} (m)")
    ax.set_ylabel(f"{'xyz'[axes[1]]} (m)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
