"""Step 1: user input specs -> ``jax.ShapeDtypeStruct`` with symbolic dims.

Every string dimension of every input lives in one shared scope, so ``"B"``
in two inputs is the same dimension; :func:`new_dimension` adds fresh ones
to that scope while the conversion traces (data-dependent output sizes).
``input_params`` become scalar (or array) inputs after the positional ones.
An input may be a pytree (a dict, a tuple of specs, a registered dataclass)
of specs: it flattens to one graph input per leaf, named after its key path
(``obs.joint_pos``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jax2onnx.values.errors import UsageError
from jax2onnx.values.keys import is_extended


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


MAX_DIM = 2**63 - 1  # ONNX dimensions are int64


def _is_shape(x: Any) -> bool:
    """A flat tuple/list (of dims, or of bad entries that ``_shape_of`` reports).

    NumPy integer scalars are dimensions (``(np.int64(2), 3)`` is a shape),
    although they have a ``shape`` like the array leaves of a pytree.
    """
    return isinstance(x, (tuple, list)) and not any(
        isinstance(d, (tuple, list, dict))
        or (hasattr(d, "shape") and not isinstance(d, np.integer))
        for d in x
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


def supported_dtype(dtype: Any, where: str) -> np.dtype:
    """``dtype`` as a native-order NumPy dtype that JAX traces and ONNX stores, or a TypeError."""
    if dtype is None:
        raise TypeError(f"{where}: dtype None is not a dtype; give e.g. 'float32'")
    try:
        result = np.dtype(dtype)
    except Exception as err:
        raise TypeError(f"{where}: dtype {dtype!r} is not a NumPy dtype ({err})") from None
    if result.byteorder not in "=|":
        result = result.newbyteorder("=")
    if result.kind in "OUSMm" or result.fields is not None or result.subdtype is not None:
        raise TypeError(
            f"{where}: dtype {result} is not supported; JAX and ONNX take bool, integer, "
            "float and complex arrays"
        )
    from jax2onnx.values.dtypes import onnx_dtype

    try:
        onnx_dtype(result)
    except TypeError:
        raise TypeError(f"{where}: dtype {result} has no ONNX equivalent") from None
    return result


def _canonical(dtype: Any, double: bool, where: str = "input") -> np.dtype:
    try:
        extended = is_extended(dtype)
    except Exception:  # not a dtype at all: supported_dtype says so, naming the input
        extended = False
    if extended:
        return dtype  # a key array input (key<fry>): the graph input carries its key data
    dtype = supported_dtype(dtype, where)
    if double:
        return dtype
    narrow = {
        np.dtype(np.float64): np.float32,
        np.dtype(np.int64): np.int32,
        np.dtype(np.uint64): np.uint32,
        np.dtype(np.complex128): np.complex64,
    }
    return np.dtype(narrow.get(dtype, dtype))


class _Scope:
    """The one ``jax.export.SymbolicScope`` of a conversion's symbolic dimensions.

    It is the scope of the first ``jax.ShapeDtypeStruct`` with symbolic
    dimensions (so its constraints hold), else a new one. A symbolic
    dimension of another, unconstrained scope is re-read into it by name
    (``B`` is ``B`` in every input); one of a constrained scope is refused.
    """

    def __init__(self) -> None:
        self.scope: Any = None

    def get(self) -> Any:
        if self.scope is None:
            from jax import export

            self.scope = export.SymbolicScope()
        return self.scope

    def adopt(self, dim: Any, where: str) -> Any:
        scope = getattr(dim, "scope", None)
        if scope is None or scope is self.scope:
            return dim
        if self.scope is None:
            self.scope = scope
            return dim
        if getattr(scope, "_explicit_constraints", None):
            raise ValueError(
                f"{where}: symbolic dimension {dim} belongs to another "
                "jax.export.SymbolicScope (with constraints) than the other inputs' dimensions; "
                "create every symbolic shape with one scope, or give the dimensions as strings"
            )
        return _symbolic(str(dim), where, self)


class _Dimensions:
    """The symbolic dimensions one conversion makes for data-dependent sizes.

    They live in the scope of the inputs' symbolic dimensions (a new scope
    when every input is static), so JAX can combine them with ``B`` and the
    like; their names (``nonzero_0``, ``unique_1`` ...) count per hint and skip
    every name an input uses.
    """

    def __init__(self, specs: Sequence[Any]) -> None:
        self.scope: Any = None
        self.taken: set[str] = set()
        self.counts: dict[str, int] = {}
        self.made = 0
        self.on_new: Any = None  # called after each new dimension (tracing re-keys JAX's caches)
        for spec in specs:
            for d in getattr(spec, "shape", ()):
                if hasattr(d, "_get_vars"):
                    if self.scope is None:
                        self.scope = getattr(d, "scope", None)
                    self.taken.update(d._get_vars())

    def new(self, hint: str) -> Any:
        from jax import export

        if not isinstance(hint, str) or not hint.isidentifier() or hint.startswith("_"):
            raise ValueError(
                f"new_dimension: hint {hint!r} must be an identifier such as 'nonzero' "
                "(it names the dimension in the exported model: nonzero_0, nonzero_1 ...)"
            )
        if self.scope is None:
            self.scope = export.SymbolicScope()
        index = self.counts.get(hint, 0)
        while f"{hint}_{index}" in self.taken:
            index += 1
        name = f"{hint}_{index}"
        self.counts[hint] = index + 1
        self.taken.add(name)
        (dim,) = export.symbolic_shape(name, scope=self.scope)
        self.made += 1
        if self.on_new is not None:
            self.on_new()
        return dim


# The dimensions of the conversion tracing in this context (None outside to_onnx's trace).
_DIMENSIONS: contextvars.ContextVar[_Dimensions | None] = contextvars.ContextVar(
    "jax2onnx_new_dimensions", default=None
)


@contextlib.contextmanager
def new_dimensions(specs: Sequence[Any]) -> Iterator[_Dimensions]:
    """Let :func:`new_dimension` make dimensions for the conversion tracing ``specs``."""
    dims = _Dimensions(specs)
    token = _DIMENSIONS.set(dims)
    try:
        yield dims
    finally:
        _DIMENSIONS.reset(token)


def new_dimension(hint: str) -> Any:
    """A fresh symbolic dimension for an output whose size depends on the data.

    For an interception's stand-in (``jnp.nonzero``, ``jnp.unique`` ...): it
    binds a primitive whose output shape has this dimension, and the
    primitive's lowering produces a value of that size. The dimension is
    named ``<hint>_<n>`` in the exported model (``nonzero_0``), unique within
    the conversion and distinct from the inputs' dimension names, and the
    core computes it from the first value that has it. Only while
    ``to_onnx`` traces (the dimension belongs to that conversion).

    Args:
        hint: the name's stem, a short identifier (``"nonzero"``).

    Returns:
        A JAX symbolic dimension, for the primitive's params and output shape:
            ``positives_p.bind(x, size=new_dimension("picked"))``.

    Raises:
        UsageError: called outside a conversion (at import, in plain JAX code).
    """
    dims = _DIMENSIONS.get()
    if dims is None:
        raise UsageError(
            f"new_dimension({hint!r}) was called outside a conversion; it gives an "
            "interception's stand-in a data-dependent size while to_onnx traces. Call it "
            "from a stand-in (a binder registered with rules.intercept), not at import or "
            "in plain JAX code"
        )
    return dims.new(hint)


def _symbolic(dim: str, where: str, scope: _Scope) -> Any:
    from jax import export

    text = dim.strip()
    if not text:
        raise ValueError(f"{where}: empty string is not a dimension name")
    try:
        (result,) = export.symbolic_shape(text, scope=scope.get())
    except Exception as err:
        raise ValueError(
            f"{where}: {dim!r} is not a valid symbolic dimension ({err}). Use a name such "
            "as 'B' or an expression of names such as '2*B'."
        ) from err
    if isinstance(result, (int, np.integer)):  # a constant such as "3" or "-1"
        return _int_dim(result, where)
    return result


def _int_dim(dim: Any, where: str) -> int:
    if dim < 0:
        raise ValueError(f"{where}: dimension {dim} is negative")
    if dim > MAX_DIM:
        raise ValueError(f"{where}: dimension {dim} does not fit ONNX's int64 dimensions")
    return int(dim)


def _shape_of(spec: Any, where: str, scope: _Scope) -> tuple[Any, ...]:
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Iterable):
        raise TypeError(
            f"{where}: shape {spec!r} ({type(spec).__name__}) is not a sequence of dimensions"
        )
    dims = []
    for axis, dim in enumerate(spec):
        if isinstance(dim, (bool, np.bool_)):
            raise TypeError(f"{where}, axis {axis}: {dim!r} is not a dimension")
        if isinstance(dim, (int, np.integer)):
            dims.append(_int_dim(dim, f"{where}, axis {axis}"))
        elif isinstance(dim, str):
            dims.append(_symbolic(dim, f"{where}, axis {axis}", scope))
        elif hasattr(dim, "_get_vars"):
            dims.append(scope.adopt(dim, f"{where}, axis {axis}"))
        else:
            raise TypeError(
                f"{where}, axis {axis}: {dim!r} ({type(dim).__name__}) is not a dimension; "
                "use an int or a string naming a symbolic dimension"
            )
    return tuple(dims)


def _leaf(item: Any, where: str, scope: _Scope, double: bool) -> jax.ShapeDtypeStruct:
    if isinstance(item, jax.ShapeDtypeStruct):
        shape = _shape_of(item.shape, where, scope)
        return jax.ShapeDtypeStruct(shape, _canonical(item.dtype, double, where))
    if isinstance(item, (tuple, list)):
        return jax.ShapeDtypeStruct(_shape_of(item, where, scope), _float_dtype(double))
    if hasattr(item, "shape") and hasattr(item, "dtype"):
        shape = _shape_of(item.shape, where, scope)
        return jax.ShapeDtypeStruct(shape, _canonical(item.dtype, double, where))
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
    check_inputs(inputs)
    input_names = check_names("input_names", input_names)
    if input_names is not None and len(input_names) > len(inputs):
        raise ValueError(f"input_names has {len(input_names)} names for {len(inputs)} inputs")
    scope = _Scope()
    specs, names, trees = [], [], []
    for i, item in enumerate(inputs):
        where = f"inputs[{i}]"
        if _is_spec(item):
            specs.append(_leaf(item, where, scope, double))
            names.append(input_names[i] if input_names and i < len(input_names) else f"in_{i}")
            trees.append(None)
            continue
        try:
            leaves, tree = jax.tree_util.tree_flatten_with_path(item, is_leaf=_is_spec)
        except Exception as err:  # e.g. a dict whose keys do not sort (1 and "a")
            raise TypeError(f"{where} is not a pytree JAX can flatten: {err}") from err
        if not leaves or not leaves[0][0]:
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
    check_params(input_params)
    for key, value in (input_params or {}).items():
        params.append((key, _param_spec(key, value, double)))

    all_names = names + [k for k, _ in params]
    duplicates = sorted({n for n in all_names if all_names.count(n) > 1})
    if duplicates:
        raise ValueError(
            "input_names (with the pytree key paths of inputs and the input_params keys) "
            f"must give unique graph input names; repeated: {duplicates}"
        )
    return InputSpecs(tuple(specs), tuple(params), tuple(names), tuple(trees))


def _param_spec(key: str, value: Any, double: bool) -> jax.ShapeDtypeStruct:
    where = f"input_params[{key!r}]"
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise ValueError(f"{where} = {value} does not fit in int64")
    try:
        array = np.asarray(value)
    except Exception as err:  # ragged nested lists, objects whose __array__ fails ...
        raise TypeError(f"{where} is not a number, bool or array: {err}") from err
    if array.dtype == object:
        raise TypeError(f"{where} = {value!r} is not a number, bool or array")
    if isinstance(value, bool):
        dtype = np.dtype(np.bool_)
    elif isinstance(value, int):
        dtype = np.dtype(np.int64 if double else np.int32)
    elif isinstance(value, float):
        dtype = _float_dtype(double)
    else:
        dtype = _canonical(array.dtype, double, where)
    return jax.ShapeDtypeStruct(array.shape, dtype)


def check_inputs(inputs: Any) -> None:
    """``inputs`` is a sequence with one entry per positional argument."""
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        hint = ""
        if isinstance(inputs, (int, np.integer)) or hasattr(inputs, "shape"):
            hint = "; for one input of a given shape write inputs=[shape]"
        raise TypeError(
            "inputs must be a list with one entry per positional argument (a shape tuple "
            f"such as ('B', 30), an array, or a jax.ShapeDtypeStruct), got "
            f"{type(inputs).__name__}{hint}"
        )


def check_params(input_params: Any) -> None:
    """``input_params`` is ``None`` or a mapping keyed by identifier strings."""
    if input_params is None:
        return
    if not isinstance(input_params, Mapping):
        raise TypeError(
            f"input_params must be a mapping of names to values, got {type(input_params).__name__}"
        )
    for key in input_params:
        if not isinstance(key, str) or not key.isidentifier():
            raise TypeError(f"input_params key {key!r} must be a Python identifier string")


def check_list(argument: str, value: Any, expected: str) -> list[Any] | None:
    """``value`` as a list (``None`` stays ``None``); a string, mapping or non-iterable is a
    TypeError saying the argument takes a list of ``expected``."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(
            f"{argument} must be a list of {expected}, got {type(value).__name__} {value!r}"
        )
    return list(value)


def check_names(argument: str, names: Any) -> list[str] | None:
    """``input_names``/``output_names`` as a list of non-empty strings (or ``None``)."""
    names = check_list(argument, names, f"strings (one per graph {argument[:-6]})")
    if names is None:
        return None
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise TypeError(f"{argument}[{i}] must be a non-empty string, got {name!r}")
    return names


def _shown(fn: Any, signature: inspect.Signature | None) -> str:
    """``fn name(params)``: the user's function as messages name it (no annotations)."""
    label = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    name = label if isinstance(label, str) else type(fn).__name__
    if signature is None:
        return f"fn {name}"
    kind = inspect.Parameter
    plain = signature.replace(
        parameters=[p.replace(annotation=kind.empty) for p in signature.parameters.values()],
        return_annotation=kind.empty,
    )
    try:
        return f"fn {name}{plain}"
    except Exception:  # a default whose repr fails (a module bound as a lambda default ...)
        return f"fn {name}"


def describe_fn(fn: Any) -> str:
    """The user's ``fn`` for an error message: ``fn name(params)`` and, for a function,
    where it is defined (``fn <lambda>(x) defined at model.py:12``)."""
    try:
        signature = inspect.signature(fn, follow_wrapped=False)
    except Exception:  # builtins, C extensions, objects with a dynamic __call__
        signature = None
    shown = _shown(fn, signature)
    try:
        code = inspect.unwrap(fn).__code__
    except Exception:  # not a Python function (a module, a callable object, a builtin)
        return shown
    return f"{shown} defined at {code.co_filename}:{code.co_firstlineno}"


def check_call(fn: Any, count: int, keywords: Sequence[str]) -> None:
    """Raise a ValueError naming ``inputs``/``input_params`` when ``fn`` cannot take them.

    ``count`` positional inputs and the ``keywords`` of ``input_params`` are
    bound to ``fn``'s signature as written (not the one a decorator copies
    with ``functools.wraps``); a callable without a signature is not checked.
    """
    if isinstance(fn, type) or not callable(fn):
        return
    try:
        signature = inspect.signature(fn, follow_wrapped=False)
    except Exception:  # builtins, C extensions, objects with a dynamic __call__
        return
    kind = inspect.Parameter
    parameters = list(signature.parameters.values())
    shown = _shown(fn, signature)
    positional = [
        p for p in parameters if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)
    ]
    var_positional = any(p.kind is kind.VAR_POSITIONAL for p in parameters)
    var_keyword = any(p.kind is kind.VAR_KEYWORD for p in parameters)
    if count > len(positional) and not var_positional:
        raise ValueError(
            f"inputs has {count} entries but {shown} takes {len(positional)} positional "
            "argument(s); give one input per positional argument"
        )
    bound = {p.name: i for i, p in enumerate(positional[:count])}
    by_name = signature.parameters
    for key in keywords:
        if key in bound and by_name[key].kind is not kind.POSITIONAL_ONLY:
            raise ValueError(
                f"input_params[{key!r}]: {shown} already gets {key!r} from inputs[{bound[key]}]"
            )
        keyword_kinds = (kind.POSITIONAL_OR_KEYWORD, kind.KEYWORD_ONLY)
        if not var_keyword and (key not in by_name or by_name[key].kind not in keyword_kinds):
            raise ValueError(f"input_params[{key!r}]: {shown} has no keyword parameter {key!r}")
    missing = [
        p.name
        for p in parameters
        if p.default is kind.empty
        and p.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD)
        and p.name not in bound
        and not (p.name in keywords and p.kind is not kind.POSITIONAL_ONLY)
    ]
    if missing:
        raise ValueError(
            f"inputs has {count} entries (and input_params {list(keywords)}), but {shown} "
            f"also needs {missing}; give one input per positional argument"
        )


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
    given = check_names("output_names", given)
    if given is not None:
        if len(given) > count:
            raise ValueError(f"output_names has {len(given)} names for {count} outputs")
        names[: len(given)] = given
    clash = sorted((set(names) & set(taken)) | {n for n in names if names.count(n) > 1})
    if clash:
        raise ValueError(
            f"output names must be unique and differ from input names: {clash} (the outputs "
            f"are named {names}, the inputs {list(taken)}; set output_names or input_names)"
        )
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
