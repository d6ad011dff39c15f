"""Step 1: user input specs -> ``jax.ShapeDtypeStruct`` with symbolic dims.

Every string dimension of every input lives in one shared scope, so ``"B"``
in two inputs is the same dimension. ``input_params`` become scalar (or
array) inputs after the positional ones. An input may be a pytree (a dict, a
tuple of specs, a registered dataclass) of specs: it flattens to one graph
input per leaf, named after its key path (``obs.joint_pos``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jax2onnx.keys import is_extended


@dataclasses.dataclass(frozen=True)
class InputSpecs:
    """Normalised inputs of one conversion.

    ``positional`` holds the flattened leaves of every positional input;
    ``trees`` the pytree structure of each input (``None`` for a plain array
    spec); ``names`` one graph input name per leaf.
    """

    positional: tuple[jax.ShapeDtypeStruct, ...]
    params: tuple[tuple[str, jax.ShapeDtypeStruct], ...]
    names: tuple[str, ...]
    trees: tuple[Any, ...] = ()

    @property
    def all_specs(self) -> list[jax.ShapeDtypeStruct]:
        return [*self.positional, *(s for _, s in self.params)]

    def rebuild(self, flat: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
        """Positional arguments and keyword params from flat values, in spec order."""
        args, i = [], 0
        for tree in self.trees:
            if tree is None:
                args.append(flat[i])
                i += 1
            else:
                args.append(jax.tree_util.tree_unflatten(tree, flat[i : i + tree.num_leaves]))
                i += tree.num_leaves
        return args, dict(zip((k for k, _ in self.params), flat[i:]))


def _is_shape(x: Any) -> bool:
    """A flat tuple/list (of dims, or of bad entries that ``_shape_of`` reports)."""
    return isinstance(x, (tuple, list)) and not any(
        isinstance(d, (tuple, list, dict)) or hasattr(d, "shape") for d in x
    )


def _is_spec(x: Any) -> bool:
    return _is_shape(x) or (hasattr(x, "shape") and hasattr(x, "dtype"))


def _path_name(path: Sequence[Any]) -> str:
    parts = []
    for key in path:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return ".".join(parts)


def _float_dtype(double: bool) -> np.dtype:
    return np.dtype(np.float64 if double else np.float32)


def _canonical(dtype: Any, double: bool) -> np.dtype:
    if is_extended(dtype):
        return dtype  # a key array input (key<fry>): the graph input carries its key data
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


def _leaf(item: Any, where: str, scope: Any, double: bool) -> jax.ShapeDtypeStruct:
    if isinstance(item, jax.ShapeDtypeStruct):
        shape = _shape_of(item.shape, where, scope)
        return jax.ShapeDtypeStruct(shape, _canonical(item.dtype, double))
    if isinstance(item, (tuple, list)):
        return jax.ShapeDtypeStruct(_shape_of(item, where, scope), _float_dtype(double))
    if hasattr(item, "shape") and hasattr(item, "dtype"):
        shape = _shape_of(tuple(item.shape), where, scope)
        return jax.ShapeDtypeStruct(shape, _canonical(item.dtype, double))
    raise TypeError(
        f"{where} is {type(item).__name__}; expected a shape tuple such as ('B', 30), "
        "an array, a jax.ShapeDtypeStruct, or a pytree (dict, tuple, dataclass) of those"
    )


def normalize_inputs(
    inputs: Any,
    input_params: Mapping[str, Any] | None,
    *,
    double: bool,
    input_names: Sequence[str] | None = None,
    arg_names: Sequence[str] = (),
) -> InputSpecs:
    """Check and normalise ``inputs``/``input_params``; errors name the bad entry."""
    from jax import export

    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise TypeError(
            "inputs must be a list with one entry per positional argument (a shape tuple "
            f"such as ('B', 30), an array, or a jax.ShapeDtypeStruct), got {type(inputs).__name__}"
        )
    if input_names is not None:
        input_names = list(input_names)
        if len(input_names) > len(inputs):
            raise ValueError(f"input_names has {len(input_names)} names for {len(inputs)} inputs")
        for i, name in enumerate(input_names):
            if not isinstance(name, str) or not name:
                raise TypeError(f"input_names[{i}] must be a non-empty string, got {name!r}")
    scope = export.SymbolicScope()
    specs, names, trees = [], [], []
    for i, item in enumerate(inputs):
        where = f"inputs[{i}]"
        if _is_spec(item):
            specs.append(_leaf(item, where, scope, double))
            names.append(input_names[i] if input_names and i < len(input_names) else f"in_{i}")
            trees.append(None)
            continue
        leaves, tree = jax.tree_util.tree_flatten_with_path(item, is_leaf=_is_spec)
        if not leaves:
            _leaf(item, where, scope, double)  # raises the TypeError naming the entry
        if input_names and i < len(input_names):
            prefix = input_names[i]
        else:
            prefix = arg_names[i] if i < len(arg_names) else f"in_{i}"
        for path, leaf in leaves:
            key = _path_name(path)
            specs.append(_leaf(leaf, f"{where}.{key}", scope, double))
            names.append(f"{prefix}.{key}")
        trees.append(tree)

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

    all_names = names + [k for k, _ in params]
    duplicates = sorted({n for n in all_names if all_names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"input_names (with the input_params keys) must give unique graph input names; "
            f"repeated: {duplicates}"
        )
    return InputSpecs(tuple(specs), tuple(params), tuple(names), tuple(trees))


def _default_output_names(out_shapes: Any) -> list[str]:
    """``out_<i>`` for a single output or a tuple/list of outputs; key paths otherwise.

    ``{"logits": x, "value": v}`` gives ``logits`` and ``value``, a NamedTuple
    its field names (``jnp.linalg.qr`` gives ``Q`` and ``R``); a tuple whose
    second element is a dict gives ``out_1.<key>``.
    """
    leaves = jax.tree_util.tree_flatten_with_path(out_shapes)[0]
    if not isinstance(out_shapes, (tuple, list)) or hasattr(out_shapes, "_fields"):
        if len(leaves) == 1 and not leaves[0][0]:
            return ["out_0"]
        return [_path_name(path) for path, _ in leaves]
    names = []
    for path, _ in leaves:
        head, rest = path[0], path[1:]
        names.append(".".join([f"out_{head.idx}", *([_path_name(rest)] if rest else [])]))
    return names


def output_names(out_shapes: Any, given: Sequence[str] | None, taken: Sequence[str]) -> list[str]:
    """One graph output name per output leaf: ``given`` first, then the defaults."""
    names = _default_output_names(out_shapes)
    count = len(names)
    if given is not None:
        given = list(given)
        if len(given) > count:
            raise ValueError(f"output_names has {len(given)} names for {count} outputs")
        for i, name in enumerate(given):
            if not isinstance(name, str) or not name:
                raise TypeError(f"output_names[{i}] must be a non-empty string, got {name!r}")
            names[i] = name
    clash = sorted((set(names) & set(taken)) | {n for n in names if names.count(n) > 1})
    if clash:
        raise ValueError(f"output names must be unique and differ from input names: {clash}")
    return names


def positional_names(fn: Any) -> list[str]:
    """Names of ``fn``'s positional parameters (prefixes of pytree input names)."""
    import inspect

    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in kinds]
