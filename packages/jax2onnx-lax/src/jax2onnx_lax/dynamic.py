"""Data-dependent output sizes: ``jnp.nonzero`` and its kin, ``jnp.unique``, ``jnp.arange``.

JAX cannot trace a function whose result size depends on runtime values
(``jnp.nonzero(x)``, ``x[mask]``, ``jnp.unique(x)``, ``jnp.arange(n)`` with a
traced ``n``): it raises ``ConcretizationTypeError`` and asks for ``size=``.
ONNX can: ``NonZero``, ``Compress``, ``Unique`` and ``Range`` give outputs whose
length is known only at run time. While ``to_onnx`` traces, these functions
are intercepted; for a call JAX cannot trace, the stand-in binds a primitive
whose output has a new symbolic dimension (``new_dimension``: ``nonzero_0``,
``compress_0``, ``unique_0``, ``arange_0`` ...), a named dynamic dimension of
the exported graph. Calls JAX traces itself (``size=``, concrete arguments,
symbolic dimensions such as ``jnp.arange(x.shape[0])``) run JAX's own code.

* ``jnp.nonzero`` (with ``jnp.where(c)`` and ``c.nonzero()``, which call it),
  ``jnp.flatnonzero``, ``jnp.argwhere``: one ``NonZero`` of JAX's mask
  (``x != 0`` for a non-bool ``x``).
* ``x[mask]`` and ``x.at[mask].get()`` with a traced boolean mask: the mask
  becomes its ``NonZero`` indices in place (NumPy's definition of boolean
  indexing), and JAX's gather does the rest.
* ``jnp.compress`` (with ``jnp.extract``): one ``Compress``.
* ``jnp.unique`` (with ``jnp.unique_values``, ``unique_counts``,
  ``unique_inverse``, ``unique_all`` and the set operations that call it): one
  sorted ``Unique`` on keys that order and compare as JAX does; the values are
  gathered at the first-occurrence indices.
* ``jnp.arange``: the element count as JAX computes it, one ``Range``, then
  JAX's own ``start + step * i`` arithmetic.

Inside ``jax.vmap`` these would be ragged, so their batching rules refuse
with a hint to pass ``size=``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from jax2onnx.plugin import Family, new_dimension, onnx_dtype

family = Family("lax")

_I64 = np.dtype(np.int64)


def _traced(value: Any) -> bool:
    """A value known only when the model runs: a tracer of the conversion."""
    return isinstance(value, jax.core.Tracer)


def _index_dtype() -> np.dtype:
    """JAX's default integer dtype (int32 unless x64 is on): its index outputs' dtype."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.int64))


def _only_while_converting(*_: Any, **params: Any) -> Any:
    raise RuntimeError(
        "this primitive has a data-dependent size and exists only while to_onnx traces; "
        "call the jax.numpy function itself outside a conversion"
    )


def _ragged(function: str, remedy: str) -> Any:
    def refuse(args, dims, **params):
        raise ValueError(
            f"{function} inside jax.vmap: each example would get its own number of results "
            f"(a ragged batch), which neither JAX nor ONNX arrays can hold. {remedy}"
        )

    return refuse


_SIZE_HINT = "Pass size= (and fill_value=) so every example has the same length."


def _no_tangents(primitive_name: str) -> Any:
    """JVP of a primitive with integer outputs only: their tangents are zero."""

    def jvp(primals, tangents, **params):
        prim = _PRIMITIVES[primitive_name]
        out = prim.bind(*primals, **params)
        outs = out if prim.multiple_results else [out]
        zeros = [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in outs]
        return out, (zeros if prim.multiple_results else zeros[0])

    return jvp


def _shaped(shape, dtype) -> Any:
    return jax.core.ShapedArray(tuple(shape), dtype)


def _primitive(name: str, abstract_eval, batching, jvp=None, multiple_results=False) -> Any:
    prim = family.primitive(
        f"numpy.{name}",
        impl=_only_while_converting,
        abstract_eval=abstract_eval,
        batching=batching,
        jvp=jvp or _no_tangents(name),
        multiple_results=multiple_results,
    )
    _PRIMITIVES[name] = prim
    return prim


_PRIMITIVES: dict[str, Any] = {}


# -- the primitives ----------------------------------------------------------

# mask (bool, rank r >= 1) -> (r, size) indices, row-major order
nonzero_p = _primitive(
    "nonzero",
    lambda mask, *, size, dtype: _shaped((mask.ndim, size), dtype),
    _ragged("jnp.nonzero (behind jnp.where(c), jnp.argwhere, x[mask] ...)", _SIZE_HINT),
)


def _compress_aval(condition, arr, *, axis, size):
    shape = list(arr.shape)
    shape[axis] = size
    return _shaped(shape, arr.dtype)


def _compress_jvp(primals, tangents, *, axis, size):
    """The tangent is the same selection, as a gather at the condition's NonZero indices."""
    condition, arr = primals
    out = compress_p.bind(condition, arr, axis=axis, size=size)
    tangent = tangents[1]
    if type(tangent) is ad.Zero:
        return out, ad.Zero(jax.typeof(out).to_tangent_aval())
    index = nonzero_p.bind(condition, size=size, dtype=_index_dtype())[0]
    return out, jnp.take(ad.instantiate_zeros(tangent), index, axis=axis, mode="clip")


compress_p = _primitive(
    "compress",
    _compress_aval,
    _ragged("jnp.compress", _SIZE_HINT),
    jvp=_compress_jvp,
)


def _unique_avals(x, *, axis, equal_nan, return_inverse, return_counts, size, dtype):
    shape = list(x.shape)
    shape[axis] = size
    out = [_shaped(shape, x.dtype), _shaped((size,), dtype)]  # values, first indices
    if return_inverse:
        out.append(_shaped((x.shape[axis],), dtype))
    if return_counts:
        out.append(_shaped((size,), dtype))
    return out


# x -> values, first indices[, inverse][, counts]; no gradient flows, as in JAX (whose
# jnp.unique without size= reads the values)
unique_p = _primitive(
    "unique", _unique_avals, _ragged("jnp.unique", _SIZE_HINT), multiple_results=True
)

# count (integer scalar) -> 0, 1, ..., count - 1 (nothing when count <= 0)
arange_p = _primitive(
    "arange",
    lambda count, *, size, dtype: _shaped((size,), dtype),
    _ragged(
        "jnp.arange with a traced length",
        "Give every example the same length (a static arange masked with jnp.where).",
    ),
)


# -- lowerings -------------------------------------------------------------------


def _int64(value):
    value.dtype = onnx_dtype(_I64)  # the builder does not know these ops' output dtypes
    return value


@family.lowering(nonzero_p)
def nonzero(ctx, mask, *, size, dtype):
    """One NonZero of the boolean mask (row-major like JAX), cast to JAX's index dtype."""
    return ctx.cast(_int64(ctx.op.NonZero(mask)), dtype)


@family.lowering(compress_p)
def compress(ctx, condition, arr, *, axis, size):
    """One Compress (a shorter condition selects among the leading slices, as in JAX)."""
    return ctx.op.Compress(arr, condition, axis=axis)


@family.lowering(arange_p)
def arange(ctx, count, *, size, dtype):
    """Range(0, count, 1) in the count's integer dtype, cast to the dtype the stand-in uses."""
    kind = np.dtype(ctx.avals_in[0].dtype)
    kind = kind if kind in (np.int32, np.int64) else _I64
    indices = ctx.op.Range(np.zeros((), kind), ctx.cast(count, kind), np.ones((), kind))
    indices.dtype = onnx_dtype(kind)
    return ctx.cast(indices, dtype)


def _is_float(dtype: np.dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


@family.lowering(unique_p)
def unique(ctx, x, *, axis, equal_nan, return_inverse, return_counts, size, dtype):
    """One sorted Unique on JAX-ordered keys; the values are Gathered at its first indices.

    Integers and bools are keyed as int64 (ONNX Runtime's Unique takes few
    dtypes). Floats need more: ONNX Runtime's Unique drops NaNs, while JAX
    sorts them last and, with ``equal_nan=True``, keeps one. So each element
    becomes the pair ``(isnan, value)`` with ``-0.0`` as ``0.0`` (JAX's sort and
    ``==`` do not tell them apart) and a NaN's value ``0``, or its position
    when ``equal_nan=False``; the pairs of a slice along ``axis`` form one row,
    and Unique over rows orders them lexicographically as JAX's lexsort does.
    """
    dtype_in = np.dtype(ctx.avals_in[0].dtype)
    if dtype_in == np.uint64:  # wrapped to int64, the sign bit flipped keeps the order
        keys, key_axis = _flip_sign(ctx, ctx.cast(x, _I64)), axis
    elif not _is_float(dtype_in):
        keys, key_axis = ctx.cast(x, _I64), axis
    else:
        keys, key_axis = _float_keys(ctx, x, axis, equal_nan), 0
    outs = ctx.op.Unique(keys, axis=key_axis, sorted=1, _outputs=4)
    values = ctx.op.Gather(x, _int64(outs[1]), axis=axis)
    wanted = [outs[1]]
    wanted += [outs[2]] if return_inverse else []
    wanted += [outs[3]] if return_counts else []
    return [values, *(ctx.cast(_int64(v), dtype) for v in wanted)]


def _flip_sign(ctx, keys):
    """``keys ^ 2**63`` (a wrapping Add of -2**63 below opset 18, where Xor is bool-only)."""
    top = np.asarray(np.iinfo(np.int64).min, np.int64)
    return ctx.op.BitwiseXor(keys, top) if ctx.opset >= 18 else ctx.op.Add(keys, top)


def _float_keys(ctx, x, axis, equal_nan):
    """Rows of ``(isnan, value)`` pairs, one row per slice along ``axis``."""
    aval = ctx.avals_in[0]
    rank, n = len(aval.shape), aval.shape[axis]
    rest = [aval.shape[i] for i in range(rank) if i != axis]
    wide = np.dtype(np.float64 if aval.dtype == np.float64 or not equal_nan else np.float32)
    value = ctx.cast(ctx.transpose(x, [axis, *(i for i in range(rank) if i != axis)]), wide)
    nan = ctx.op.IsNaN(value)
    zero = ctx.const(np.zeros((), wide), wide)
    value = ctx.where(ctx.op.Equal(value, zero), zero, value)
    fill = zero
    if not equal_nan:  # every NaN its own key, in the order of appearance
        limit = ctx.op.Squeeze(ctx.dim(n), ctx.i64([0]))
        positions = _int64(ctx.op.Range(np.int64(0), limit, np.int64(1)))
        fill = ctx.op.Reshape(ctx.cast(positions, wide), ctx.i64([-1] + [1] * len(rest)))
    value = ctx.where(nan, fill, value)
    last = ctx.i64([len(rest) + 1])
    pairs = ctx.op.Concat(
        ctx.op.Unsqueeze(ctx.cast(nan, wide), last), ctx.op.Unsqueeze(value, last), axis=-1
    )
    return ctx.reshape(pairs, (n, 2 * math.prod(rest)))


# -- stand-ins -------------------------------------------------------------------


def _mask(a: Any) -> Any:
    """JAX's mask for the nonzero family: ``a`` itself when bool, else ``a != 0``."""
    a = jnp.asarray(a)
    return a if a.dtype == np.bool_ else a != 0


def _nonzero_rows(mask: Any) -> Any:
    """The (rank, count) indices of a traced boolean mask, with a new dimension."""
    return nonzero_p.bind(mask, size=new_dimension("nonzero"), dtype=_index_dtype())


def _rows(indices: Any) -> tuple[Any, ...]:
    return tuple(lax.index_in_dim(indices, i, keepdims=False) for i in range(indices.shape[0]))


def _one_traced_array(name: str, *, rank: int = 1) -> Any:
    """``accept=``: no ``size=``, and argument ``name`` traced with at least ``rank`` axes."""

    def accept(args: dict[str, Any]) -> bool:
        value = args[name]
        return args.get("size") is None and _traced(value) and jnp.ndim(value) >= rank

    return accept


def _nonzero(a, *, size=None, fill_value=None):
    return _rows(_nonzero_rows(_mask(a)))


def _flatnonzero(a, *, size=None, fill_value=None):
    return _nonzero_rows(_mask(jnp.ravel(a)))[0]


def _argwhere(a, *, size=None, fill_value=None):
    return _nonzero_rows(_mask(a)).T


def _binder(stand_in):
    return lambda original: stand_in  # accept= wraps it, falling back to the original


family.intercept(
    "jax.numpy.nonzero",
    nonzero_p,
    binder=_binder(_nonzero),
    accept=_one_traced_array("a"),
    aliases=("jax._src.numpy.lax_numpy.nonzero",),  # jnp.where(c) and c.nonzero() call it
)
for _target, _stand_in in (("flatnonzero", _flatnonzero), ("argwhere", _argwhere)):
    family.intercept(
        f"jax.numpy.{_target}", nonzero_p, binder=_binder(_stand_in), accept=_one_traced_array("a")
    )


def _compress_operands(condition, a, axis):
    """``(condition, arr, axis, length)`` as jnp.compress reads them (1-D condition, flat arr
    for ``axis=None``)."""
    if jnp.ndim(condition) != 1:
        raise ValueError("condition must be a 1D array")
    arr = jnp.asarray(a)
    if axis is None:
        arr, axis = jnp.ravel(arr), 0
    axis = _axis(axis, arr.ndim, "jnp.compress")
    return condition, arr, axis, arr.shape[axis]


def _compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
    if not _traced(condition):
        return _compress_known(np.asarray(condition).astype(bool), a, axis)
    condition, arr, axis, length = _compress_operands(jnp.asarray(condition).astype(bool), a, axis)
    if isinstance(length, int) and condition.shape[0] > length:
        # JAX raises when a cut entry is True; ONNX Compress would ignore it
        condition = condition[:length]
    return compress_p.bind(condition, arr, axis=axis, size=new_dimension("compress"))


def _compress_known(condition, a, axis):
    """A condition known at conversion time: a Gather of its (static) true positions.

    JAX's own ``jnp.compress`` cannot trace this inside ``to_onnx`` (it checks the
    cut-off entries of the condition with a traced comparison)."""
    condition, arr, axis, length = _compress_operands(condition, a, axis)
    if isinstance(length, int) and condition[length:].any():
        raise ValueError("condition contains entries that are out of bounds")
    keep = np.flatnonzero(condition[:length] if isinstance(length, int) else condition)
    return jnp.take(arr, keep.astype(_index_dtype()), axis=axis, mode="clip")


def _axis(axis: Any, rank: int, where: str) -> int:
    if not isinstance(axis, (int, np.integer)) or not -rank <= axis < rank:
        raise ValueError(f"{where}: axis {axis!r} is out of bounds for an array of rank {rank}")
    return int(axis) % rank


family.intercept(
    "jax.numpy.compress",
    compress_p,
    binder=_binder(_compress),
    accept=lambda args: (
        args["out"] is None
        and (
            _one_traced_array("condition")(args)
            or (args.get("size") is None and _traced(args["a"]) and not _traced(args["condition"]))
        )
    ),
    aliases=("jax._src.numpy.lax_numpy.compress",),  # jnp.extract and x.compress() call it
)


# -- x[mask] ---------------------------------------------------------------------


def _is_bool(value: Any) -> bool:
    return hasattr(value, "dtype") and value.dtype == np.bool_


def _same_dims(a: Any, b: Any) -> bool:
    try:
        return all(bool(x == y) for x, y in zip(a, b, strict=True))
    except Exception:  # symbolic dimensions JAX cannot compare
        return False


def _mask_axes(arr: Any, idx: Any) -> list[int | None] | None:
    """Per entry of ``idx``: the first axis a traced boolean mask covers, else None.

    ``None`` overall when no entry is such a mask, or the index is one JAX
    should judge (a list, a mask not matching the axes it covers, a traced
    boolean scalar, two ellipses).
    """
    entries = idx if isinstance(idx, tuple) else (idx,)
    masks = [_traced(e) and _is_bool(e) for e in entries]
    if not any(m and e.ndim >= 1 for m, e in zip(masks, entries)):
        return None
    if any(isinstance(e, list) or (m and e.ndim == 0) for m, e in zip(masks, entries)):
        return None
    if sum(e is Ellipsis for e in entries) > 1:
        return None

    def width(e: Any) -> int:  # how many axes of arr the entry consumes
        if e is None or e is Ellipsis:
            return 0
        return jnp.ndim(e) if _is_bool(e) else 1

    spread = jnp.ndim(arr) - sum(width(e) for e in entries)
    if spread < 0:
        return None
    starts: list[int | None] = []
    axis = 0
    for e, mask in zip(entries, masks):
        starts.append(axis if mask else None)
        if mask and not _same_dims(e.shape, arr.shape[axis : axis + e.ndim]):
            return None
        axis += spread if e is Ellipsis else width(e)
    return starts


def _expand_masks(arr: Any, idx: Any) -> tuple[Any, ...]:
    """``idx`` with each traced boolean mask replaced by its NonZero index rows."""
    entries = idx if isinstance(idx, tuple) else (idx,)
    out: list[Any] = []
    for e, start in zip(entries, _mask_axes(arr, idx), strict=True):
        out.extend(_rows(_nonzero_rows(e)) if start is not None else [e])
    return tuple(out)


def _take_binder(original):
    @functools.wraps(original)
    def take(arr, idx, **options):
        return original(arr, _expand_masks(arr, idx), **options)

    return take


family.intercept(
    "jax._src.numpy.indexing.rewriting_take",  # x[idx] and x.at[idx].get() call it
    nonzero_p,
    binder=_take_binder,
    accept=lambda args: _mask_axes(args["arr"], args["idx"]) is not None,
)


# -- jnp.unique --------------------------------------------------------------------


def _unique(
    ar,
    return_index=False,
    return_inverse=False,
    return_counts=False,
    axis=None,
    *,
    equal_nan=True,
    size=None,
    fill_value=None,
    sorted=True,  # noqa: A002 - jnp.unique's parameter name; JAX always sorts
):
    x = jnp.asarray(ar)
    shape = x.shape
    if axis is None:
        x, along = jnp.ravel(x), 0
    else:
        along = _axis(axis, x.ndim, "jnp.unique")
    _check_unique(x, along, equal_nan)
    outs = unique_p.bind(
        x,
        axis=along,
        equal_nan=bool(equal_nan),
        return_inverse=bool(return_inverse),
        return_counts=bool(return_counts),
        size=new_dimension("unique"),
        dtype=_index_dtype(),
    )
    result, index, rest = [outs[0]], outs[1], list(outs[2:])
    if return_index:
        result.append(index)
    if return_inverse:
        inverse = rest.pop(0)
        result.append(inverse.reshape(shape) if axis is None else inverse)
    if return_counts:
        result.append(rest.pop(0))
    return result[0] if len(result) == 1 else tuple(result)


def _check_unique(x: Any, axis: int, equal_nan: bool) -> None:
    dtype = np.dtype(x.dtype)
    rest = [d for i, d in enumerate(x.shape) if i != axis]
    problem = None
    inexact = _is_float(dtype) or dtype.kind == "c"
    if any(isinstance(d, int) and d == 0 for d in rest):
        problem = "empty slices along the other axes"
    elif inexact and not equal_nan and not all(isinstance(d, int) for d in rest):
        problem = "equal_nan=False on float slices of symbolic size"
    elif inexact and not equal_nan and math.prod(rest) != 1:
        problem = "equal_nan=False on float slices of more than one element"
    if problem is not None:
        raise NotImplementedError(
            f"jnp.unique with a data-dependent size does not convert for {problem}. "
            "Pass size= (and fill_value=) to jnp.unique, which JAX traces itself."
        )


family.intercept(
    "jax.numpy.unique",
    unique_p,
    binder=_binder(_unique),
    accept=_one_traced_array("ar", rank=0),
    # jnp.unique_values, unique_counts, unique_inverse and unique_all call it there
    aliases=("jax._src.numpy.setops.unique",),
)


# -- jnp.arange --------------------------------------------------------------------


def _arange_accept(args: dict[str, Any]) -> bool:
    values = [v for v in (args["start"], args["stop"], args["step"]) if v is not None]
    if not any(_traced(v) for v in values):
        return False
    if args.get("device") is not None or args.get("out_sharding") is not None:
        return False
    for v in values:
        if jnp.ndim(v) != 0 or jnp.result_type(v) == np.bool_:
            return False
        if jnp.issubdtype(jnp.result_type(v), jnp.complexfloating):
            return False
    return True


def _arange(start, stop=None, step=None, dtype=None, *, device=None, out_sharding=None):
    """JAX's arange: the count ``ceil((stop - start) / step)``, then ``start + step * i``."""
    # no gradient flows, as in JAX (its jnp.arange reads the values)
    start, stop, step = (lax.stop_gradient(v) if _traced(v) else v for v in (start, stop, step))
    given = [v for v in (start, stop, step) if v is not None]
    dtype = jnp.result_type(*given) if dtype is None else dtype
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if stop is None:
        start, stop = 0, start
    zero_start = not _traced(start) and start == 0
    span = stop if zero_start else stop - start
    if _is_float(jnp.result_type(start, stop, *([] if step is None else [step]))):
        span = span if step is None else span / step
        count = jnp.ceil(span).astype(_index_dtype())
    elif step is None:
        count = jnp.asarray(span).astype(_index_dtype())
    else:  # exact ceiling division, as NumPy's float64 count is for these integers
        count = jnp.asarray(-((start - stop) // step)).astype(_index_dtype())
    size = new_dimension("arange")
    if step is None:
        iota = arange_p.bind(count, size=size, dtype=dtype)
        if zero_start:
            return iota
        return lax.add(lax.convert_element_type(start, dtype), iota)
    working = dtype
    if _is_float(dtype) and jnp.finfo(dtype).bits < 32:
        working = np.dtype(np.float32)  # as JAX computes half-precision aranges
    iota = arange_p.bind(count, size=size, dtype=working)
    scaled = lax.mul(lax.convert_element_type(step, working), iota)
    return lax.convert_element_type(
        lax.add(lax.convert_element_type(start, working), scaled), dtype
    )


family.intercept("jax.numpy.arange", arange_p, binder=_binder(_arange), accept=_arange_accept)


register = family.register
