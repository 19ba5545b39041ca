"""A pytree as a flat dict of named NumPy arrays for a checkpoint, and back.

Orbax refuses arrays with no elements (a scene without planes has plane histories of shape
(s, 0, 3)); they carry no data, so they are left out here and rebuilt from a template of the
same structure on restore. Names are the leaves' key paths joined by dots.
"""

from __future__ import annotations

import jax
import numpy as np


def leaf_names(tree) -> list[tuple[str, object]]:
    """(dotted key path, leaf) of every leaf, in flattening order."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [(jax.tree_util.keystr(path, simple=True, separator="."), leaf) for path, leaf in leaves]


def flatten_leaves(tree, prefix: str = "") -> dict[str, np.ndarray]:
    """{prefix + name: array} of the leaves with at least one element."""
    out = {}
    for name, leaf in leaf_names(tree):
        array = np.asarray(leaf)
        if array.size:
            out[prefix + name] = array
    return out


def unflatten_leaves(flat: dict, template, prefix: str = ""):
    """The pytree of ``template``'s structure with its leaves from ``flat`` (empty leaves, and
    only they, may be missing: they come back as empty arrays of the template's shape)."""
    named = leaf_names(template)
    leaves = []
    for name, leaf in named:
        key = prefix + name
        if key in flat:
            leaves.append(np.asarray(flat[key]))
        elif np.size(leaf) == 0:
            leaves.append(np.zeros(np.shape(leaf), np.asarray(leaf).dtype))
        else:
            raise KeyError(f"checkpoint has no {key!r}")
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), leaves)
