"""``jax.numpy`` helpers: macro interceptions where they shrink the graph, and cases.

Most of ``jax.numpy`` needs nothing here: it traces into lax primitives that
the family modules lower. An interception is added only where the exported
graph gets clearly smaller than the lax decomposition:

* ``jnp.clip`` with Python-number bounds: one ``Clip`` instead of ``Max`` and
  ``Min`` (ONNX Runtime's Clip propagates a NaN operand like JAX's
  ``minimum(maximum(x, lo), hi)``, and gives ``hi`` when ``lo > hi`` as JAX
  does). A NaN bound, an array bound, or a dtype ONNX Runtime has no Clip
  kernel for runs JAX's own decomposition.
* ``jnp.linspace`` with Python-number arguments: one constant (JAX's values,
  computed while tracing) instead of an iota/arithmetic chain.

``lax.tile_p`` (the primitive of ``jnp.tile``) is lowered here to one ``Tile``.

The rest are cases proving that the lax path is already compact
(``jnp.einsum`` is one MatMul/Gemm, ``jnp.moveaxis`` one Transpose,
``jnp.arange`` a constant, ``jnp.repeat`` Unsqueeze/Expand/Reshape) and broad
cases over the common ``jax.numpy`` API converting through the lax lowerings.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, call_arguments, case, kernel_dtypes

family = Family("lax")


# The originals, captured before any interception patches them.
_ORIG_CLIP = jnp.clip
_ORIG_LINSPACE = jnp.linspace


# -- jnp.clip ---------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _clip_accept(arguments: dict[str, Any]) -> bool:
    lo, hi = arguments.get("min"), arguments.get("max")
    if lo is None and hi is None:
        return False
    for bound in (lo, hi):
        if bound is not None and (not _is_number(bound) or math.isnan(bound)):
            return False
    return True


def _clip_impl(arr, *, min=None, max=None):  # noqa: A002 - jnp.clip's parameter names
    return _ORIG_CLIP(arr, min=min, max=max)


clip_p = family.primitive("numpy.clip", impl=_clip_impl, batching="elementwise", jvp="fallback")
family.intercept("jax.numpy.clip", clip_p, accept=_clip_accept)


def _exact_bound(value: Any, dtype: np.dtype) -> np.ndarray | None:
    """``value`` in ``dtype`` as JAX converts it, or None when the integer does not fit."""
    if value is None:
        return None
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        if float(value) != int(value) or not info.min <= int(value) <= info.max:
            raise ValueError
    return np.asarray(value, dtype=dtype)


@family.lowering(clip_p, native_dtypes=kernel_dtypes("Clip"))
def clip(ctx, x, *, min=None, max=None):  # noqa: A002 - jnp.clip's parameter names
    """One Clip with constant bounds (a missing bound is an empty input).

    Other dtypes (int16, uint16: no ORT kernel), a result dtype that
    differs from the operand's (an integer or bool array clipped by a float or an
    int) or an integer bound out of range inline JAX's ``maximum``/``minimum``.
    """
    dtype = np.dtype(ctx.avals_in[0].dtype)
    if np.dtype(ctx.avals_out[0].dtype) == dtype:
        try:
            lo, hi = _exact_bound(min, dtype), _exact_bound(max, dtype)
        except (ValueError, OverflowError):
            lo = hi = None
        else:
            return ctx.op.Clip(
                x,
                None if lo is None else ctx.const(lo),
                None if hi is None else ctx.const(hi),
            )
    return ctx.fallback()


_CLIP_EDGES = np.array([np.nan, -np.inf, np.inf, -5.0, -1.0, -0.5, 0.0, 0.5, 2.0, 3.0, 1e30])

family.add_cases(
    "jnp.clip",
    lambda: [
        case(
            "both",
            lambda x: jnp.clip(x, -1.0, 2.0),
            [("B", 7)],
            expect=["Clip:Bx7"],
            counts={"Max": 0, "Min": 0},
            input_range=(-4.0, 4.0),
            variants=["f32", "f64", "bf16", "f16"],
        ),
        case("min_only", lambda x: jnp.clip(x, min=0.5), [(3, 4)], expect=["Clip"]),
        case("opset17", lambda x: jnp.clip(x, -1.0, 1.0), [(3, 4)], expect=["Clip"], opset=17),
        case("max_only", lambda x: jnp.clip(x, max=0.5), [(3, 4)], expect=["Clip"]),
        case(
            "edges",
            lambda x: jnp.clip(x, -1.0, 2.0),
            [_CLIP_EDGES],
            expect=["Clip"],
            variants=["f32", "f64", "bf16"],
        ),
        case("lo_above_hi", lambda x: jnp.clip(x, 3.0, 2.0), [_CLIP_EDGES], expect=["Clip"]),
        case(
            "nan_bound",
            lambda x: jnp.clip(x, float("nan"), 2.0),
            [_CLIP_EDGES],
            counts={"Clip": 0},
        ),
        case("array_bounds", lambda x, lo: jnp.clip(x, lo, 2.0), [(3, 4), ()], counts={"Clip": 0}),
        case(
            "int",
            lambda x: jnp.clip(x, -3, 4),
            [(4, 5)],
            dtypes=[np.int32],
            expect=["Clip"],
        ),
        case(
            "int8_uint8",
            lambda x, y: (jnp.clip(x, -3, 4), jnp.clip(y, 2, 9)),
            [(4, 5), (4, 5)],
            dtypes=[np.int8, np.uint8],
            counts={"Clip": 2},
        ),
        case("int16_decomposed", lambda x: jnp.clip(x, -3, 4), [(4, 5)], dtypes=[np.int16]),
        case("int_float_bound", lambda x: jnp.clip(x, -1.5, 2.5), [(4, 5)], dtypes=[np.int32]),
        case(
            "int64",
            lambda x: jnp.clip(x, -3, 4),
            [(4, 5)],
            dtypes=[np.int64],
            variants=["f64"],
            expect=["Clip"],
        ),
        case(
            "vmap",
            jax.vmap(lambda x: jnp.clip(x, -1.0, 1.0)),
            [("B", 2, 3)],
            expect=["Clip:Bx2x3"],
        ),
        case(
            "grad",
            jax.grad(lambda x: jnp.clip(x, -1.0, 1.0).sum()),
            [("B",)],
            input_range=(-3.0, 3.0),
        ),
    ],
)


# -- jnp.linspace ------------------------------------------------------------


def _linspace_accept(arguments: dict[str, Any]) -> bool:
    if not (_is_number(arguments["start"]) and _is_number(arguments["stop"])):
        return False
    if not isinstance(arguments["num"], int) or arguments.get("retstep"):
        return False
    if arguments.get("device") is not None:
        return False
    try:
        hash(arguments.get("dtype"))
    except TypeError:
        return False
    return True


def _linspace_impl(*, start, stop, num, endpoint, retstep, dtype, axis, device):
    del retstep, device
    return _ORIG_LINSPACE(start, stop, num, endpoint=endpoint, dtype=dtype, axis=axis)


linspace_p = family.primitive("numpy.linspace", impl=_linspace_impl, batching="fallback", jvp=None)


def _linspace_binder(original):
    arguments = call_arguments(original)  # every argument is a parameter: no operands
    return lambda *args, **kwargs: linspace_p.bind(**arguments(*args, **kwargs))


family.intercept("jax.numpy.linspace", linspace_p, binder=_linspace_binder, accept=_linspace_accept)


@family.lowering(linspace_p)
def linspace(ctx, **params):
    """One constant: JAX's own values, computed while converting (no operands)."""
    value = np.asarray(jax.jit(functools.partial(_linspace_impl, **params))())
    return ctx.const(value)


family.add_cases(
    "jnp.linspace",
    lambda: [
        case(
            "constant",
            lambda x: x + jnp.linspace(0.0, 1.0, 4),
            [("B", 4)],
            counts={"Add": 1, "Mul": 0, "Div": 0},
        ),
        case("no_endpoint", lambda x: x * jnp.linspace(-2, 3, 5, endpoint=False), [(5,)]),
        case(
            "int_dtype",
            lambda x: x + jnp.linspace(0, 10, 6, dtype=jnp.int32),
            [(6,)],
            dtypes=[np.int32],
        ),
        case(
            "array_start", lambda s: jnp.linspace(s, 1.0, 5), [()], variants=["f32", "f64", "bf16"]
        ),
        case("vmap", jax.vmap(lambda x: x * jnp.linspace(0.0, 1.0, 3)), [("B", 3)]),
        case("grad", jax.grad(lambda x: (x * x * jnp.linspace(0.0, 1.0, 3)).sum()), [(3,)]),
    ],
)
family.add_cases(
    "jnp.arange",
    lambda: [
        case("constant", lambda x: x + jnp.arange(4.0), [("B", 4)], counts={"Add": 1}),
        case("int_step", lambda x: x * jnp.arange(2, 14, 3), [(4,)], dtypes=[np.int32]),
        case("vmap", jax.vmap(lambda x: x + jnp.arange(3.0)), [("B", 3)], counts={"Add": 1}),
    ],
)


# -- lax.tile_p (jnp.tile) ---------------------------------------------------


@family.lowering(
    lax.tile_p,
    cases=lambda: [
        case("jnp_tile", lambda x: jnp.tile(x, (2, 3)), [(3, 4)], expect=["Tile:6x12"]),
        case("jnp_tile_rank_up", lambda x: jnp.tile(x, (2, 1, 3)), [(3, 4)], expect=["Tile"]),
        case("jnp_tile_batch", lambda x: jnp.tile(x, (1, 2)), [("B", 3)], expect=["Tile:Bx6"]),
        case("jnp_tile_int8", lambda x: jnp.tile(x, 3), [(4,)], dtypes=[np.int8]),
        case("jnp_tile_bool", lambda x: jnp.tile(x, (2, 2)), [(2, 3)], dtypes=[np.bool_]),
        case("jnp_tile_vmap", jax.vmap(lambda x: jnp.tile(x, 2)), [("B", 3)], expect=["Tile"]),
        case("jnp_tile_grad", jax.grad(lambda x: (jnp.tile(x, 3) ** 2).sum()), [(4,)]),
        case(
            "jnp_tile_symbolic_reps",
            lambda cls, x: jnp.tile(cls, (x.shape[0], 1, 1)) + x,
            [(1, 1, 8), ("B", 1, 8)],
            expect=["Tile:Bx1x8"],
        ),
        case(
            "jnp_tile_symbolic_reps_2d",
            lambda t, x: jnp.tile(t, (x.shape[0], 2)) * x,
            [(1, 3), ("B", 6)],
            expect=["Tile:Bx6"],
        ),
        case(
            "vit_class_token",
            lambda cls, x: jnp.concatenate([jnp.tile(cls, (x.shape[0], 1, 1)), x], axis=1),
            [(1, 1, 8), ("B", 4, 8)],
            expect=["Tile:Bx1x8 -> Concat:Bx5x8"],
        ),
        case(
            "vit_class_token_static",
            lambda cls, x: jnp.concatenate([jnp.tile(cls, (x.shape[0], 1, 1)), x], axis=1),
            [(1, 1, 8), (3, 4, 8)],
            expect=["Tile:3x1x8 -> Concat:3x5x8"],
        ),
    ],
)
def tile(ctx, x, *, reps, **_):
    """One Tile; repeats are a constant, or computed at run time when one is symbolic."""
    return ctx.op.Tile(x, ctx.shape(reps))


# -- already compact through lax: cases only ---------------------------------

family.add_cases(
    "jnp.einsum",
    lambda: [
        case(
            "matmul",
            lambda a, b: jnp.einsum("ij,jk->ik", a, b),
            [(3, 4), (4, 5)],
            counts={"MatMul": 1, "Einsum": 0, "Transpose": 0},
        ),
        case(
            "batched",
            lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
            [("B", 3, 4), ("B", 4, 5)],
            expect=["MatMul:Bx3x5"],
        ),
        case(
            "transposed",
            lambda a, b: jnp.einsum("ij,kj->ik", a, b),
            [(3, 4), (5, 4)],
            counts={"Gemm": 1, "MatMul": 0, "Einsum": 0},
        ),
        case(
            "chain", lambda a, b, c: jnp.einsum("ij,jk,kl->il", a, b, c), [(3, 4), (4, 5), (5, 2)]
        ),
        case(
            "outer",
            lambda a, b: jnp.einsum("i,j->ij", a, b),
            [(3,), (4,)],
            variants=["f32", "f64", "bf16"],
        ),
        case("trace", lambda a: jnp.einsum("ii->", a), [(4, 4)]),
        case(
            "int32",
            lambda a, b: jnp.einsum("ij,jk->ik", a, b),
            [(3, 4), (4, 2)],
            dtypes=[np.int32, np.int32],
        ),
        case(
            "vmap",
            jax.vmap(lambda a, b: jnp.einsum("ij,jk->ik", a, b)),
            [("B", 3, 4), ("B", 4, 5)],
            expect=["MatMul:Bx3x5"],
        ),
        case(
            "grad",
            jax.grad(lambda a, b: (jnp.einsum("ij,jk->ik", a, b) ** 2).sum()),
            [(3, 4), (4, 5)],
        ),
    ],
)
family.add_cases(
    "jnp.moveaxis",
    lambda: [
        case(
            "one_transpose",
            lambda x: jnp.moveaxis(x, 0, -1),
            [(2, 3, 4)],
            expect=["Transpose:3x4x2"],
            counts={"Transpose": 1},
        ),
        case(
            "two_axes",
            lambda x: jnp.moveaxis(x, (0, 1), (2, 0)),
            [("B", 3, 4)],
            counts={"Transpose": 1},
        ),
        case(
            "vmap",
            jax.vmap(lambda x: jnp.moveaxis(x, 0, 1)),
            [("B", 3, 4)],
            counts={"Transpose": 1},
        ),
        case(
            "grad",
            jax.grad(lambda x: (jnp.moveaxis(x, 0, 1) ** 2 * jnp.arange(6.0).reshape(3, 2)).sum()),
            [(2, 3)],
        ),
    ],
)
family.add_cases(
    "jnp.repeat",
    lambda: [
        case(
            "axis",
            lambda x: jnp.repeat(x, 3, axis=1),
            [("B", 4)],
            expect=["Unsqueeze -> Expand -> Reshape:Bx12"],
            counts={"Tile": 0},
        ),
        case("flat", lambda x: jnp.repeat(x, 2), [(3, 4)]),
        case("int8", lambda x: jnp.repeat(x, 2, axis=0), [(3, 4)], dtypes=[np.int8]),
        case("vmap", jax.vmap(lambda x: jnp.repeat(x, 2)), [("B", 3)]),
        case("grad", jax.grad(lambda x: (jnp.repeat(x, 2) ** 2).sum()), [(3,)]),
    ],
)


# -- the common jax.numpy API through the lax lowerings ----------------------


_MASK = np.array([[True, False, True, True], [False, False, True, False], [True] * 4])

family.add_cases(
    "jnp.reductions_where",
    lambda: [
        case("sum_where", lambda x: jnp.sum(x, axis=1, where=_MASK), [(3, 4)]),
        case(
            "mean_where",
            lambda x: jnp.mean(x, axis=1, where=_MASK),
            [(3, 4)],
            variants=["f32", "f64", "bf16"],
        ),
        case("max_where", lambda x: jnp.max(x, axis=1, where=_MASK, initial=-5.0), [(3, 4)]),
        case("min_where", lambda x: jnp.min(x, where=_MASK, initial=5.0), [(3, 4)]),
        case("sum_where_array", lambda x, m: jnp.sum(x, where=m > 0), [("B", 4), ("B", 4)]),
    ],
)
_WITH_NAN = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan], [-2.0, 0.5, np.nan]])
family.add_cases(
    "jnp.nan_functions",
    lambda: [
        case("nansum", lambda x: jnp.nansum(x, axis=1), [_WITH_NAN]),
        case(
            "nanmean",
            lambda x: jnp.nanmean(x, axis=0),
            [_WITH_NAN],
            variants=["f32", "f64", "bf16"],
        ),
        case("nanmax", lambda x: jnp.nanmax(x, axis=1), [_WITH_NAN]),
        case("nanmin", lambda x: jnp.nanmin(x), [_WITH_NAN[:1]]),
        case("nanprod", lambda x: jnp.nanprod(x, axis=1), [_WITH_NAN]),
        case("nansum_random", lambda x: jnp.nansum(x), [("B", 3)]),
    ],
)
family.add_cases(
    "jnp.linalg",
    lambda: [
        case("norm_vector", lambda x: jnp.linalg.norm(x), [(5,)]),
        case("norm_axis", lambda x: jnp.linalg.norm(x, axis=-1), [("B", 5)]),
        case("norm_l1", lambda x: jnp.linalg.norm(x, ord=1, axis=1), [(3, 5)]),
        case("norm_inf", lambda x: jnp.linalg.norm(x, ord=jnp.inf, axis=1), [(3, 5)]),
        case("norm_fro", lambda x: jnp.linalg.norm(x, "fro"), [(3, 5)]),
        case("trace", lambda x: jnp.trace(x), [(4, 4)]),
        case("trace_offset", lambda x: jnp.trace(x, offset=1, axis1=1, axis2=2), [(2, 4, 5)]),
        case("outer", lambda a, b: jnp.outer(a, b), [(3,), (4,)]),
        case("cross", lambda a, b: jnp.cross(a, b), [("B", 3), ("B", 3)]),
        case("vdot", lambda a, b: jnp.vdot(a, b), [(6,), (6,)]),
        case("norm_grad", jax.grad(lambda x: jnp.linalg.norm(x)), [(5,)], input_range=(0.5, 2.0)),
    ],
)
family.add_cases(
    "jnp.polyval",
    lambda: [
        case("polyval", lambda p, x: jnp.polyval(p, x), [(4,), ("B",)]),
        case("polyval_const", lambda x: jnp.polyval(jnp.array([1.0, -2.0, 0.5]), x), [(5,)]),
    ],
)
family.add_cases(
    "jnp.histogram",
    lambda: [
        case(
            "static_bins",
            lambda x: jnp.histogram(x, bins=5, range=(-1.0, 1.0))[0],
            [(20,)],
            input_range=(-1.2, 1.2),
        ),
        case(
            "edges",
            lambda x: jnp.histogram(x, bins=4, range=(0.0, 2.0))[1],
            [(6,)],
            no_unused_inputs=False,  # the edges depend on the static range only
        ),
        case(
            "static_bins_symbolic",
            lambda x: jnp.histogram(x, bins=4, range=(-1.0, 1.0))[0],
            [("N",)],
            input_range=(-1.2, 1.2),
            dim_sizes={"N": (9, 1, 20)},
        ),
    ],
)
family.add_cases(
    "jnp.windows",
    lambda: [
        case("hanning", lambda x: x * jnp.hanning(8), [(8,)]),
        case("hamming", lambda x: x * jnp.hamming(7), [(7,)]),
        case("blackman", lambda x: x * jnp.blackman(6), [(6,)]),
    ],
)
family.add_cases(
    "jnp.unique",
    lambda: [
        case(
            "static_size",
            lambda x: jnp.unique(x, size=6, fill_value=-1),
            [np.array([3, 1, 3, 2, 7, 1, 1], np.int32)],
        ),
        case(
            "float",
            lambda x: jnp.unique(jnp.round(x), size=4, fill_value=0.0),
            [(8,)],
        ),
        case(  # fewer values than size at N = 2: filled
            "float_symbolic",
            lambda x: jnp.unique(jnp.round(x), size=4, fill_value=0.0),
            [("N",)],
            dim_sizes={"N": (8, 2, 13)},
        ),
    ],
)
family.add_cases(
    "jnp.search",
    lambda: [
        case(
            "searchsorted",
            lambda a, v: jnp.searchsorted(a, v),
            [np.array([0.0, 1.0, 2.5, 4.0, 8.0]), (6,)],
            input_range=(-1.0, 9.0),
        ),
        case(
            "searchsorted_right",
            lambda a, v: jnp.searchsorted(a, v, side="right"),
            [np.array([0, 1, 1, 3, 8], np.int32), np.array([1, 0, 3, 9, -1], np.int32)],
        ),
        case(
            "digitize",
            lambda x: jnp.digitize(x, jnp.array([-1.0, 0.0, 1.5])),
            [(7,)],
            input_range=(-3.0, 3.0),
        ),
        case(
            "interp",
            lambda x: jnp.interp(x, jnp.array([0.0, 1.0, 3.0]), jnp.array([1.0, -1.0, 2.0])),
            [(9,)],
            input_range=(-1.0, 4.0),
        ),
    ],
)
family.add_cases(
    "jnp.triangular",
    lambda: [
        case("tri", lambda x: x * jnp.tri(3, 4, k=1), [(3, 4)]),
        case("tril", lambda x: jnp.tril(x), [("B", 4, 4)]),
        case("triu", lambda x: jnp.triu(x, k=-1), [(4, 5)]),
        case("tril_int", lambda x: jnp.tril(x), [(3, 3)], dtypes=[np.int32]),
    ],
)
family.add_cases(
    "jnp.diag",
    lambda: [
        case("diag_of_vector", lambda x: jnp.diag(x), [(4,)]),
        case("diag_of_matrix", lambda x: jnp.diag(x, k=1), [(4, 5)]),
        case("diagonal", lambda x: jnp.diagonal(x, axis1=1, axis2=2), [("B", 3, 3)]),
    ],
)
family.add_cases(
    "jnp.rearrange",
    lambda: [
        case("roll", lambda x: jnp.roll(x, 2, axis=1), [("B", 5)]),
        case("roll_flat", lambda x: jnp.roll(x, -3), [(3, 4)]),
        case("rot90", lambda x: jnp.rot90(x), [(3, 4)]),
        case("rot90_k2", lambda x: jnp.rot90(x, k=2, axes=(1, 2)), [(2, 3, 4)]),
        case("flip", lambda x: jnp.flip(x, axis=0), [(3, 4)], dtypes=[np.int32]),
        case("flip_all", lambda x: jnp.flip(x), [(3, 4)]),
        case(
            "stack",
            lambda a, b: jnp.stack([a, b], axis=1),
            [("B", 3), ("B", 3)],
        ),
        case("concatenate", lambda a, b: jnp.concatenate([a, b], axis=-1), [(2, 3), (2, 5)]),
    ],
)
family.add_cases(
    "jnp.select",
    lambda: [
        case("where3", lambda c, a, b: jnp.where(c > 0, a, b), [("B", 4), ("B", 4), ("B", 4)]),
        case("where_scalar", lambda a: jnp.where(a > 0, a, 0.0), [(3, 4)]),
        case("take", lambda x, i: jnp.take(x, i, axis=1), [(3, 5), np.array([4, 0, 2], np.int32)]),
        case(
            "take_along_axis",
            lambda x, i: jnp.take_along_axis(x, i, axis=1),
            [(3, 4), np.array([[0, 3], [1, 1], [2, 0]], np.int32)],
        ),
    ],
)
family.add_cases(
    "jnp.sorting",
    lambda: [
        case("sort", lambda x: jnp.sort(x, axis=-1), [("B", 6)]),
        case("argsort", lambda x: jnp.argsort(x), [(7,)]),
        case("argsort_int", lambda x: jnp.argsort(x, axis=0), [(5, 3)], dtypes=[np.int32]),
        case("cumsum", lambda x: jnp.cumsum(x, axis=1), [("B", 5)]),
        case("cumsum_reverse", lambda x: jnp.flip(jnp.cumsum(jnp.flip(x, 0), 0), 0), [(6,)]),
    ],
)


register = family.register
