"""Step 1: user input specs -> ``jax.ShapeDtypeStruct`` with symbolic dims.

Every string dimension of every input lives in one shared scope, so ``"B"``
in two inputs is the same dimension. ``input_params`` become scalar (or
array) inputs after the positional ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class InputSpecs:
    """Normalised inputs of one conversion."""

    positional: tuple[jax.ShapeDtypeStruct, ...]
    params: tuple[tuple[str, jax.ShapeDtypeStruct], ...]
    names: tuple[str, ...]

    @property
    def all_specs(self) -> list[jax.ShapeDtypeStruct]:
        return [*self.positional, *(s for _, s in self.params)]


def _float_dtype(double: bool) -> np.dtype:
    return np.dtype(np.float64 if double else np.float32)


def _canonical(dtype: Any, double: bool) -> np.dtype:
    dtype = np.dtype(dtype)
    if double:
        return dtype
    narrow = {
        np.dtype(np.float64): np.float32,
        np.dtype(np.int64): np.int32,
        np.dtype(np.uint64): np.uint32,
        np.dtype(np.complex128): np.complex64,
    }
    return np.dtype(narrow.get(dtype, dtype))


def _symbolic(dim: str, where: str, scope: Any) -> Any:
    from jax import export

    text = dim.strip()
    if not text:
        raise ValueError(f"{where}: empty string is not a dimension name")
    try:
        (result,) = export.symbolic_shape(text, scope=scope)
    except Exception as err:
        raise ValueError(
            f"{where}: {dim!r} is not a valid symbolic dimension ({err}). Use a name such "
            "as 'B' or an expression of names such as '2*B'."
        ) from err
    return result


def _shape_of(spec: Sequence[Any], where: str, scope: Any) -> tuple[Any, ...]:
    dims = []
    for axis, dim in enumerate(spec):
        if isinstance(dim, (bool, np.bool_)):
            raise TypeError(f"{where}, axis {axis}: {dim!r} is not a dimension")
        if isinstance(dim, (int, np.integer)):
            if dim < 0:
                raise ValueError(f"{where}, axis {axis}: dimension {dim} is negative")
            dims.append(int(dim))
        elif isinstance(dim, str):
            dims.append(_symbolic(dim, f"{where}, axis {axis}", scope))
        elif hasattr(dim, "_get_vars"):
            dims.append(dim)
        else:
            raise TypeError(
                f"{where}, axis {axis}: {dim!r} ({type(dim).__name__}) is not a dimension; "
                "use an int or a string naming a symbolic dimension"
            )
    return tuple(dims)


def normalize_inputs(
    inputs: Any,
    input_params: Mapping[str, Any] | None,
    *,
    double: bool,
    input_names: Sequence[str] | None = None,
) -> InputSpecs:
    """Check and normalise ``inputs``/``input_params``; errors name the bad entry."""
    from jax import export

    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise TypeError(
            "inputs must be a list with one entry per positional argument (a shape tuple "
            f"such as ('B', 30), an array, or a jax.ShapeDtypeStruct), got {type(inputs).__name__}"
        )
    scope = export.SymbolicScope()
    specs = []
    for i, item in enumerate(inputs):
        where = f"inputs[{i}]"
        if isinstance(item, jax.ShapeDtypeStruct):
            shape = _shape_of(item.shape, where, scope)
            specs.append(jax.ShapeDtypeStruct(shape, _canonical(item.dtype, double)))
        elif isinstance(item, (tuple, list)):
            specs.append(jax.ShapeDtypeStruct(_shape_of(item, where, scope), _float_dtype(double)))
        elif hasattr(item, "shape") and hasattr(item, "dtype"):
            shape = _shape_of(tuple(item.shape), where, scope)
            specs.append(jax.ShapeDtypeStruct(shape, _canonical(item.dtype, double)))
        else:
            raise TypeError(
                f"{where} is {type(item).__name__}; expected a shape tuple such as ('B', 30), "
                "an array, or a jax.ShapeDtypeStruct"
            )

    params = []
    if input_params is not None:
        if not isinstance(input_params, Mapping):
            raise TypeError(
                "input_params must be a mapping of names to values, got "
                f"{type(input_params).__name__}"
            )
        for key, value in input_params.items():
            if not isinstance(key, str) or not key.isidentifier():
                raise TypeError(f"input_params key {key!r} must be a Python identifier string")
            array = np.asarray(value)
            if array.dtype == object:
                raise TypeError(f"input_params[{key!r}] = {value!r} is not a number, bool or array")
            if isinstance(value, bool):
                dtype = np.dtype(np.bool_)
            elif isinstance(value, int):
                dtype = np.dtype(np.int64 if double else np.int32)
            elif isinstance(value, float):
                dtype = _float_dtype(double)
            else:
                dtype = _canonical(array.dtype, double)
            params.append((key, jax.ShapeDtypeStruct(array.shape, dtype)))

    names = [f"in_{i}" for i in range(len(specs))]
    if input_names is not None:
        input_names = list(input_names)
        if len(input_names) > len(specs):
            raise ValueError(f"input_names has {len(input_names)} names for {len(specs)} inputs")
        for i, name in enumerate(input_names):
            if not isinstance(name, str) or not name:
                raise TypeError(f"input_names[{i}] must be a non-empty string, got {name!r}")
            names[i] = name
    all_names = names + [k for k, _ in params]
    duplicates = sorted({n for n in all_names if all_names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"input_names (with the input_params keys) must give unique graph input names; "
            f"repeated: {duplicates}"
        )
    return InputSpecs(tuple(specs), tuple(params), tuple(names))
