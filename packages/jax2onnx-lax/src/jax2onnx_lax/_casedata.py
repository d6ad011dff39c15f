"""Test data shared by the cases of several family modules."""

from __future__ import annotations

import numpy as np

from jax2onnx.plugin import case

INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)


def edges(dtype) -> np.ndarray:
    """Boundary values of an integer dtype: extremes, around zero, a few small ones."""
    info = np.iinfo(dtype)
    values = {info.min, info.min + 1, info.max - 1, info.max, 0, 1, 2, 7}
    if info.min < 0:
        values |= {-1, -2, -7}
    return np.array(sorted(values), dtype=dtype)


def all_pairs(dtype) -> list[np.ndarray]:
    """Every pair of boundary values, as two flat arrays (overflow, x / 0, MIN / -1 ...)."""
    v = edges(dtype)
    return [np.repeat(v, len(v)), np.tile(v, len(v))]


def x64(dtype) -> list[str] | None:
    """``variants=`` for a case with inputs of ``dtype``: 64-bit ints need x64 mode."""
    return ["f64"] if np.dtype(dtype).itemsize == 8 else None


def int_cases(name: str, fn, dtypes=INTS) -> list:
    """One case per integer dtype on all pairs of its boundary values."""
    return [case(f"{name}_{np.dtype(d).name}", fn, all_pairs(d), variants=x64(d)) for d in dtypes]
