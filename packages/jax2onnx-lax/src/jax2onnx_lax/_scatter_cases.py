"""Cases of the scatter lowerings (``scatter.py``), kept apart to keep that module short."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.lax import GatherScatterMode, ScatterDimensionNumbers

from jax2onnx.plugin import case

_I32 = np.int32

_ROWS = np.array([3, -1, 9, 0], _I32)  # -1 is row 4 (jnp normalises it); row 9 is dropped
_COLS = np.array([0, 5, -2, -9], _I32)  # -9 stays negative after normalising: dropped


def _raw(kind, window, inserted, to_operand, batching=((), ()), mode=None):
    dn = ScatterDimensionNumbers(
        update_window_dims=window,
        inserted_window_dims=inserted,
        scatter_dims_to_operand_dims=to_operand,
        operand_batching_dims=batching[0],
        scatter_indices_batching_dims=batching[1],
    )
    fn = getattr(lax, kind)
    return lambda x, i, u: fn(x, i, u, dn, mode=mode)


def _at(x):
    return jnp.asarray(x).at


def _vmapped(method):
    return jax.vmap(lambda x, i, u: getattr(_at(x)[i], method)(u))


_DROP = GatherScatterMode.FILL_OR_DROP
_CLIP = GatherScatterMode.CLIP
_NO_INDEX = np.zeros((0,), _I32)
_STARTS = np.array([[1], [0], [-1]], _I32)  # a window covering axis 0 fits at start 0 only


def _whole_cases(kind, method, opset=None):
    """The updates cover the whole operand: no operand axis is indexed.

    ``set`` gets no batch of several kept updates: which one wins is unspecified.
    """
    whole = _raw(kind, (0, 1), (), ())
    batch = _raw(kind, (1, 2), (), ())
    at = lambda x, u: getattr(_at(x)[()], method)(u)  # noqa: E731
    compact = {"counts": {"And": 0, "Slice": 0, "Pad": 0}}  # no bounds check, no scratch
    shape_only = {"no_unused_inputs": False}  # a zero-length index has no values to read
    forms = [
        ("", lambda x, u: whole(x, jnp.zeros((0,), _I32), u), [("B", 3), ("B", 3)], compact),
        ("_at", at, [(2, 3), (2, 3)], compact),
        ("_scalar", at, [(), ()], {}),
        ("_index_input", whole, [(2, 3), _NO_INDEX, (2, 3)], shape_only),
        ("_drop", _raw(kind, (1, 2), (), (0,), mode=_DROP), [(2, 3), _STARTS, (3, 2, 3)], {}),
    ]
    if kind == "scatter":
        forms.append(
            ("_batch_of_one", batch, [(2, 3), np.zeros((1, 0), _I32), (1, 2, 3)], shape_only)
        )
    else:
        vmapped = jax.vmap(lambda x, u: getattr(_at(x)[...], method)(u), in_axes=(None, 0))
        forms += [
            ("_batch", batch, [(2, 3), np.zeros((3, 0), _I32), (3, 2, 3)], shape_only),
            (
                "_batch_symbolic",
                batch,
                [(2, 3), ("N", 0), ("N", 2, 3)],
                {"dtypes": [None, _I32, None], **shape_only},
            ),
            ("_clip", _raw(kind, (1, 2), (), (0,), mode=_CLIP), [(2, 3), _STARTS, (3, 2, 3)], {}),
            ("_vmap", vmapped, [(2, 3), ("B", 2, 3)], {}),
        ]
    prefix = "whole" if opset is None else f"opset{opset}_whole"
    return [
        case(prefix + name, fn, inputs, opset=opset, **extra) for name, fn, inputs, extra in forms
    ]


def _row_in_turn(mode):
    """An integer table's row ``i`` set in every step of a loop (a solver's bookkeeping)."""

    def fn(x, i, u):
        def step(k, acc):
            index = lax.dynamic_index_in_dim(i, k, keepdims=False)
            return acc.at[index].set(u[k] + acc[0], mode=mode)

        return lax.fori_loop(0, i.shape[0], step, x)

    return fn


_TURNS = np.array([2, -1, 7, 0, -9, 2], _I32)  # row 4 by jnp's normalising; 7 and -9 outside


def scatter_set_cases():
    return [
        *(
            case(  # one integer row at a time: a Where over the rows, no ScatterND
                f"integer_row_{mode}_{np.dtype(t).name}",
                _row_in_turn(mode),
                [(5, 3), _TURNS, (6, 3)],
                dtypes=[t, _I32, t],
                input_range=(-50, 50),
                counts={"ScatterND": 0},
                variants=["f64"] if t == np.int64 else None,
            )
            for mode, t in (("drop", np.int32), ("clip", np.uint8), ("drop", np.int64))
        ),
        case(
            "rows",
            lambda x, u: _at(x)[_ROWS].set(u),
            [(5, 3), (4, 3)],
            expect=["Concat -> ScatterND -> Slice:5x3"],  # the clamped row indices fold
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "columns_symbolic",
            lambda x, u: _at(x)[:, _COLS].set(u),
            [("B", 6), ("B", 4)],
            expect=["Transpose -> Concat -> ScatterND -> Slice -> Transpose:Bx6"],
        ),
        case(
            "constant_point",
            lambda x, u: _at(x)[2, 1].set(u),
            [(4, 3), ()],
            # the index arithmetic on constants folds at conversion: one in-bounds ScatterND
            expect=["ScatterND:4x3"],
            counts={"Where": 0, "Slice": 0, "Concat": 0},
        ),
        case(
            "constant_indices",
            lambda x, u: _raw("scatter", (1,), (0,), (0,))(x, np.array([[2], [0]], _I32), u),
            [(4, "B"), (2, "B")],
            expect=["ScatterND:4xB"],
            counts={"Where": 0, "Concat": 0, "Slice": 0, "Cast": 0},
        ),
        case(
            "point_arrays",
            lambda x, i, j, u: _at(x)[i, j].set(u),
            [(4, 5, 2), (), (), (2,)],
            dtypes=[None, _I32, _I32, None],
            input_range=(-6, 7),
        ),
        case("slice", lambda x, u: _at(x)[1:4].set(u), [(5, "B"), (3, "B")]),
        case(
            "strided_slice_and_array",
            lambda x, u: _at(x)[::2, np.array([2, 0])].set(u),
            [(5, 3), (3, 2)],
        ),
        case(
            "vmap",
            lambda x, i, u: _vmapped("set")(x, i[:, None], u),
            [("B", 5, 4), ("B",), ("B", 1, 4)],
            dtypes=[None, _I32, None],
            input_range=(-7, 7),
        ),
        case(
            "window_clip",
            _raw("scatter", (1,), (0,), (0, 1), mode=GatherScatterMode.CLIP),
            [(5, 6), np.array([[1, 5], [-3, 2]], _I32), (2, 3)],
        ),
        case(
            "window_drop",
            _raw("scatter", (1,), (0,), (0, 1), mode=GatherScatterMode.FILL_OR_DROP),
            [(5, 6), np.array([[1, 4], [3, 3], [0, -1]], _I32), (3, 3)],
        ),
        case(
            "clip_mode",
            lambda x, u: _at(x)[np.array([1, 9]), 1:].set(u, mode="clip"),
            [(5, 3), (2, 2)],
        ),
        case(
            "fori_loop",
            lambda x: lax.fori_loop(0, 3, lambda k, y: _at(y)[k + 1].set(y[k] * 2.0), x),
            [(5, 2)],
        ),
        case(
            "opset17",
            lambda x, u: _at(x)[:, _COLS].set(u),
            [(3, 6), (3, 4)],
            opset=17,
        ),
        *(
            case(
                f"rows_{np.dtype(t).name}",
                lambda x, u: _at(x)[_ROWS].set(u),
                [(5, 3), (4, 3)],
                dtypes=[t, t],
                variants=["f64"] if np.dtype(t).itemsize == 8 else None,
            )
            for t in (np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64, np.bool_)
        ),
        *_whole_cases("scatter", "set"),
    ]


def scatter_add_cases():
    return [
        case(
            "duplicates",
            lambda x, i, u: _at(x)[i].add(u),
            [(5, 3), (8,), (8, 3)],
            dtypes=[None, _I32, None],  # random in [-5, 6): repeated, negative and dropped rows
            expect=["Where -> ScatterND -> Slice:5x3"],
        ),
        case(
            "duplicates_half",
            lambda x, i, u: _at(x)[i].add(u),
            [(5, 3), (8,), (8, 3)],
            dtypes=[None, _I32, None],
            # ORT has no half-precision ScatterND reduction: the precision step widens it
            variants=["bf16", "f16"],
        ),
        case(
            "columns_symbolic",
            lambda x, i, u: _at(x)[:, i].add(u),
            [("B", 4), (6,), ("B", 6)],
            dtypes=[None, _I32, None],
        ),
        case(
            "grad_of_gather",
            jax.grad(lambda x, i: jnp.sum(jnp.sin(x[i]))),
            [(5, 3), (7,)],
            dtypes=[None, _I32],
            input_range=(-5, 5),
        ),
        case(
            "vmap",
            lambda x, i, u: _vmapped("add")(x, i, u),
            [("B", 4), ("B", 6), ("B", 6)],
            dtypes=[None, _I32, None],
        ),
        case(
            "scan",
            lambda x, i: lax.scan(lambda c, j: (_at(c)[j].add(1.0), None), x, i)[0],
            [(4, 3), (6,)],
            dtypes=[None, _I32],
        ),
        case(
            "clip_mode",
            lambda x, i, u: _at(x)[i].add(u, mode="clip"),
            [(5,), (9,), (9,)],
            dtypes=[None, _I32, None],
            input_range=(-9, 9),
        ),
        case(
            "opset17",
            lambda x, i, u: _at(x)[i, 1:3].add(u),
            [(5, 4), (6,), (6, 2)],
            dtypes=[None, _I32, None],
            opset=17,
        ),
        *(
            case(
                f"duplicates_{np.dtype(t).name}",
                lambda x, i, u: _at(x)[i].add(u),
                [(4, 2), (7,), (7, 2)],
                dtypes=[t, _I32, t],
                variants=["f64"] if np.dtype(t).itemsize == 8 else None,
            )
            for t in (np.int8, np.uint8, np.int32, np.int64)
        ),
        *_whole_cases("scatter_add", "add"),
        # opset 13: the Loop form (ScatterND has no reduction before 16)
        case(
            "opset13_duplicates",
            lambda x, i, u: _at(x)[i].add(u),
            [(5, 3), (8,), (8, 3)],
            dtypes=[None, _I32, None],  # random in [-5, 6): repeated, negative and dropped rows
            opset=13,
            expect=["Loop -> Slice:5x3"],
            counts={"ScatterElements": 0},
        ),
        case(
            "opset13_symbolic_batch",
            lambda x, i, u: _at(x)[i, 1:3].add(u),
            [(5, 4), ("N",), ("N", 2)],
            dtypes=[None, _I32, None],
            opset=13,
        ),
        case(
            "opset13_vmap",
            lambda x, i, u: _vmapped("add")(x, i, u),
            [("B", 4), ("B", 6), ("B", 6)],
            dtypes=[None, _I32, None],
            opset=13,
        ),
        case(
            "opset13_clip_mode",
            lambda x, i, u: _at(x)[i].add(u, mode="clip"),
            [(5,), (9,), (9,)],
            dtypes=[None, _I32, None],
            input_range=(-9, 9),
            opset=13,
        ),
        case(
            "opset13_grad_of_gather",
            jax.grad(lambda x, i: jnp.sum(jnp.sin(x[i]))),
            [(5, 3), (7,)],
            dtypes=[None, _I32],
            input_range=(-5, 5),
            opset=13,
        ),
        case(
            "opset13_segment_sum",
            lambda u, i: jax.ops.segment_sum(u, i, num_segments=4),
            [(9, 2), (9,)],
            dtypes=[None, _I32],
            input_range=(-1, 5),
            opset=13,
        ),
        *(
            case(
                f"opset13_duplicates_{np.dtype(t).name}",
                lambda x, i, u: _at(x)[i].add(u),
                [(4, 2), (7,), (7, 2)],
                dtypes=[t, _I32, t],
                opset=13,
            )
            for t in (np.int8, np.uint32)
        ),
    ]


def scatter_sub_cases():
    return [
        case(
            "duplicates",
            lambda x, i, u: _at(x)[i].subtract(u),
            [(5, "B"), (8,), (8, "B")],
            dtypes=[None, _I32, None],
        ),
        *(
            case(
                f"duplicates_{np.dtype(t).name}",
                lambda x, i, u: _at(x)[i].subtract(u),
                [(4, 2), (7,), (7, 2)],
                dtypes=[t, _I32, t],
                variants=["f64"] if np.dtype(t).itemsize == 8 else None,
            )
            for t in (np.int8, np.uint8, np.int32, np.uint32, np.uint64)
        ),
        *_whole_cases("scatter_sub", "subtract"),
        case(
            "opset13_duplicates",
            lambda x, i, u: _at(x)[i].subtract(u),
            [(5, "B"), (8,), (8, "B")],
            dtypes=[None, _I32, None],
            opset=13,
            expect=["Loop -> Slice:5xB"],
        ),
        *(
            case(
                f"opset13_duplicates_{np.dtype(t).name}",
                lambda x, i, u: _at(x)[i].subtract(u),
                [(4, 2), (7,), (7, 2)],
                dtypes=[t, _I32, t],
                variants=["f64"] if np.dtype(t).itemsize == 8 else None,
                opset=13,
            )
            for t in (np.uint8, np.uint64)
        ),
    ]


def scatter_mul_cases():
    return [
        case(
            "duplicates",
            lambda x, i, u: _at(x)[i].multiply(u),
            [(5, "B"), (8,), (8, "B")],
            dtypes=[None, _I32, None],
        ),
        case(
            "vmap",
            lambda x, i, u: _vmapped("multiply")(x, i, u),
            [(3, 4), (3, 5), (3, 5)],
            dtypes=[None, _I32, None],
        ),
        *(
            case(
                f"duplicates_{np.dtype(t).name}",
                lambda x, i, u: _at(x)[i].multiply(u),
                [(4, 2), (7,), (7, 2)],
                dtypes=[t, _I32, t],
            )
            for t in (np.int8, np.uint8, np.int32)
        ),
        *_whole_cases("scatter_mul", "multiply"),
        case(
            "opset13_duplicates",
            lambda x, i, u: _at(x)[i].multiply(u),
            [(5, "B"), (8,), (8, "B")],
            dtypes=[None, _I32, None],
            opset=13,
            expect=["Loop -> Slice:5xB"],
        ),
        case(
            "opset13_duplicates_int16",
            lambda x, i, u: _at(x)[i].multiply(u),
            [(4, 2), (7,), (7, 2)],
            dtypes=[np.int16, _I32, np.int16],
            opset=13,
        ),
    ]


_NANS = np.array([[np.nan, 1.0], [2.0, 0.5], [3.0, -1.0], [4.0, -0.5]], np.float32)
_NAN_UPDATES = np.array([[1, 2], [np.nan, 0], [2, 7], [5, np.nan], [np.nan] * 2], np.float32)


def extremum_cases(method):
    return [
        case(
            "duplicates",
            lambda x, i, u: getattr(_at(x)[i], method)(u),
            [(5, "B"), (8,), (8, "B")],
            dtypes=[None, _I32, None],
        ),
        case(
            "nan",
            lambda x, u: getattr(_at(x)[np.array([0, 1, 1, 2, 9])], method)(u),
            [_NANS, _NAN_UPDATES],
        ),
        case(
            "nan_half",
            lambda x, u: getattr(_at(x)[np.array([0, 1, 1, 2, 9])], method)(u),
            [_NANS, _NAN_UPDATES],
            variants=["bf16", "f16"],
        ),
        case(
            "window_drop",
            _raw(f"scatter_{method}", (1,), (0,), (0, 1), mode=GatherScatterMode.FILL_OR_DROP),
            [(5, 6), (4, 2), (4, 3)],
            dtypes=[None, _I32, None],
            input_range=(-1, 6),
        ),
        case(
            "batching",
            _raw(f"scatter_{method}", (2,), (1,), (1,), batching=((0,), (0,))),
            [("B", 5, 3), ("B", 4, 1), ("B", 4, 3)],
            dtypes=[None, _I32, None],
        ),
        case(
            "opset17",
            lambda x, i, u: getattr(_at(x)[:, i], method)(u),
            [("B", 5, 2), (6,), ("B", 6, 2)],
            dtypes=[None, _I32, None],
            opset=17,
            expect=["Loop"],
        ),
        case(
            "opset17_nan",
            lambda x, u: getattr(_at(x)[np.array([0, 1, 1, 2, 9])], method)(u),
            [_NANS, _NAN_UPDATES],
            opset=17,
        ),
        *(
            case(
                f"opset17_{np.dtype(t).name}",
                _raw(f"scatter_{method}", (1,), (0,), (0, 1), mode=GatherScatterMode.CLIP),
                [(5, 6), (4, 2), (4, 3)],
                dtypes=[t, _I32, t],
                input_range=(-1, 6),
                opset=17,
            )
            for t in (np.int16, np.uint8, np.bool_)
        ),
        *(
            case(
                f"duplicates_{np.dtype(t).name}",
                lambda x, i, u: getattr(_at(x)[i], method)(u),
                [(4, 2), (7,), (7, 2)],
                dtypes=[t, _I32, t],
            )
            for t in (np.int8, np.uint8, np.int32, np.bool_)
        ),
        *_whole_cases(f"scatter_{method}", method),
        *_whole_cases(f"scatter_{method}", method, opset=17),
        case(
            "opset13_batching",
            _raw(f"scatter_{method}", (2,), (1,), (1,), batching=((0,), (0,))),
            [("B", 5, 3), ("B", 4, 1), ("B", 4, 3)],
            dtypes=[None, _I32, None],
            opset=13,
            expect=["Loop"],
        ),
        case(
            "opset13_nan",
            lambda x, u: getattr(_at(x)[np.array([0, 1, 1, 2, 9])], method)(u),
            [_NANS, _NAN_UPDATES],
            opset=13,
        ),
        case(
            "opset13_int8_drop",
            _raw(f"scatter_{method}", (1,), (0,), (0, 1), mode=GatherScatterMode.FILL_OR_DROP),
            [(5, 6), (4, 2), (4, 3)],
            dtypes=[np.int8, _I32, np.int8],
            input_range=(-1, 6),
            opset=13,
        ),
    ]
