"""Small matplotlib helpers shared by the cases (Agg backend, compact PNGs)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DPI = 90  # keeps each PNG well under 200 KB


def figure(panels: int = 1, width: float = 4.2, height: float = 3.4):
    """A row of ``panels`` axes."""
    fig, axes = plt.subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    return fig, list(axes[0])


def save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def convergence(ax, resolutions, errors, order: float, label: str) -> None:
    """Log-log error against resolution with a slope -2 guide through the coarsest point."""
    n = np.asarray(resolutions, float)
    e = np.asarray(errors, float)
    ax.loglog(n, e, "o-", label=f"{label} (order {order:.2f})")
    ax.loglog(n, e[0] * (n[0] / n) ** 2, "k--", lw=0.8, label="slope -2")
    ax.set_xlabel("cells per length N")
    ax.set_ylabel("relative L2 error")
    ax.set_xticks(n, [str(int(v)) for v in n])
    ax.minorticks_off()
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=8)
