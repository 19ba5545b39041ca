"""Ensembles over devices: the member axis of a batch of independent runs, sharded.

Independent members need no communication, so the member axis is simply split over all
devices (a 1-D mesh named ``members``); a member count that is not a multiple of the device
count is padded by the caller (with copies it drops afterwards).
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MEMBER_AXIS = "members"


def member_sharding(size: int) -> tuple[int, NamedSharding]:
    """The padded member count (a multiple of the device count) and the sharding of a leading
    member axis over all devices."""
    devices = jax.devices()
    padded = math.ceil(size / len(devices)) * len(devices)
    mesh = Mesh(np.array(devices), (MEMBER_AXIS,))
    return padded, NamedSharding(mesh, PartitionSpec(MEMBER_AXIS))
