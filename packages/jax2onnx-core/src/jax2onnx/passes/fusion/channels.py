"""Per-channel constants: what a group norm's affine and a folded batch norm multiply by.

A per-channel constant varies along one axis of the value it meets (the
channel axis) and broadcasts along every other: ``[C]`` against a
channels-last ``(N, H, W, C)``, ``[C, 1, 1]`` or ``[1, C, 1, 1]`` against a
channels-first ``(N, C, H, W)``, a scalar against anything.
"""

from __future__ import annotations

import numpy as np

from jax2onnx.passes.fusion.match import constant
from jax2onnx.values.ir import ir


def per_channel(value: ir.Value | None, rank: int, axis: int, size: int) -> np.ndarray | None:
    """``value`` as a float array of shape ``[size]`` when it is a floating-point constant
    of rank at most ``rank`` whose dimensions, aligned on the right against a value of
    that rank, are 1 everywhere but along ``axis`` (where it is 1 or ``size``)."""
    array = constant(value)
    if array is None or array.dtype.kind != "f" or array.ndim > rank:
        return None
    padded = array.reshape((1,) * (rank - array.ndim) + array.shape)
    if any(padded.shape[a] != 1 for a in range(rank) if a != axis):
        return None
    if padded.shape[axis] not in (1, size):
        return None
    return np.broadcast_to(padded.reshape(-1), (size,)).copy()
