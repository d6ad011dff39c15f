"""Cases of :mod:`jax2onnx_lax.dynamic`: outputs whose size depends on the data.

Each output's data-dependent axis is a named dimension of the exported
graph (``nonzero_0``, ``compress_0``, ``unique_0``, ``arange_0``); the
``expect`` patterns check that name on the node producing it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax.dynamic import arange_p, compress_p, nonzero_p, unique_p

family = Family("lax")

_F32, _I32 = np.float32, np.int32
_EDGES = np.array([3.0, np.nan, 1.0, -0.0, np.nan, 0.0, 1.0, -np.inf, np.inf, 3.0], _F32)
_ROWS = np.array([[1, 2], [0, 1], [1, 2], [0, -1], [0, 1]], _I32)
_COLUMNS = np.array(
    [[1.0, np.nan, 0.0, np.nan, 1.0], [2.0, 5.0, 1.0, 5.0, 2.0], [-0.0, 1.0, 0.0, 1.0, 0.0]], _F32
)
_ALL = {"return_index": True, "return_inverse": True, "return_counts": True}


def _scan_masked_sums(xs):
    def body(carry, x):
        total = jnp.sum(x[x > 0])  # a new dimension inside the Loop body
        return carry + total, total

    return lax.scan(body, jnp.zeros((), xs.dtype), xs)


family.add_cases(
    nonzero_p,
    lambda: [
        case(
            "bool_mask",
            lambda x: jnp.nonzero(x > 0),
            [("B", 4)],
            expect=["Greater -> NonZero", "Gather:nonzero_0"],
        ),
        case(
            "float",
            lambda x: jnp.nonzero(jnp.round(x)),
            [("B", 3)],
            input_range=(-1.5, 1.5),
            expect=["Equal -> Not -> NonZero", "Gather:nonzero_0"],
        ),
        case("int", lambda *a: jnp.nonzero(*a), [(4, 3)], dtypes=[_I32], expect=["NonZero"]),
        case(
            "int8",
            lambda *a: jnp.nonzero(*a),
            [(7,)],
            dtypes=[np.int8],
            expect=["Squeeze:nonzero_0"],  # one axis: the index row is the one row
        ),
        case("bool", lambda *a: jnp.nonzero(*a), [("B",)], dtypes=[np.bool_], expect=["NonZero"]),
        case(
            "edges",
            lambda *a: jnp.nonzero(*a),
            [np.array([0.0, -0.0, np.nan, np.inf, 1e-30, -2.0], _F32)],
        ),
        case("none_found", lambda x: jnp.nonzero(x > 100.0), [(5,)], expect=["NonZero"]),
        case("where_one_argument", lambda x: jnp.where(x > 0), [("B", 3)], expect=["NonZero"]),
        case("method", lambda x: (jnp.asarray(x) > 0).nonzero()[0], [("B",)], expect=["NonZero"]),
        case(
            "gather",
            lambda x: x[jnp.nonzero(x > 0)],
            [("B", 4)],
            expect=["NonZero", "GatherND:nonzero_0"],
        ),
        case(
            "shared_indices",
            lambda x, y: (lambda i: x[i] * y[i])(jnp.nonzero(x > 0)),
            [("B", 3), ("B", 3)],
            expect=["Mul:nonzero_0"],
        ),
        case(
            "size_given",
            lambda x: jnp.nonzero(x > 0, size=4, fill_value=-1),
            [(3, 4)],
            counts={"NonZero": 0},
        ),
        case("in_scan", _scan_masked_sums, [("B", 5)], expect=["Loop"]),
        case(
            "in_cond",
            lambda p, x: lax.cond(p > 0, lambda v: jnp.sum(v[v > 0]), jnp.sum, x),
            [(), ("B",)],
            expect=["If"],
        ),
        case(
            "jit",
            jax.jit(lambda x: jnp.nonzero(x > 0)[0] * 2),
            [("B",)],
            expect=["Mul:nonzero_0"],
        ),
    ],
)
family.add_cases(
    nonzero_p,
    lambda: [
        case(
            "flatnonzero_float",
            lambda x: jnp.flatnonzero(jnp.round(x)),
            [("B", 3)],
            input_range=(-1.5, 1.5),
            expect=["NonZero", "Squeeze:nonzero_0"],
        ),
        case(
            "flatnonzero_int",
            lambda *a: jnp.flatnonzero(*a),
            [(2, 5)],
            dtypes=[_I32],
            expect=["NonZero"],
        ),
    ],
)
family.add_cases(
    nonzero_p,
    lambda: [
        case(
            "argwhere_int",
            lambda *a: jnp.argwhere(*a),
            [(3, 4)],
            dtypes=[_I32],
            expect=["Transpose:nonzero_0x2"],
        ),
        case(
            "argwhere_bool_mask", lambda x: jnp.argwhere(x > 0), [("B", 2, 3)], expect=["NonZero"]
        ),
    ],
)
family.add_cases(
    nonzero_p,
    lambda: [
        case("mask_sum", lambda x: jnp.sum(x[x > 0]), [("B", 4)], expect=["NonZero", "ReduceSum"]),
        case("mask_mean", lambda x: jnp.mean(x[x > 0]), [("B", 3)], expect=["NonZero"]),
        case(
            "mask_rows",
            lambda x, m: x[m > 0],
            [("B", 3), ("B",)],
            expect=["Gather:nonzero_0x3"],
        ),
        case(
            "mask_columns",
            lambda x, m: x[:, m],
            [(3, "N"), ("N",)],
            dtypes=[None, np.bool_],
            expect=["NonZero"],
        ),
        case("mask_ellipsis", lambda x: x[..., x[0, 0] > 0], [(2, 3, 4)], expect=["NonZero"]),
        case("mask_int", lambda x: x[x % 2 == 0], [("B",)], dtypes=[_I32], expect=["NonZero"]),
        case("mask_at_get", lambda x: jnp.asarray(x).at[x > 0].get(), [(5,)], expect=["NonZero"]),
        case(
            "mask_broadcast",
            lambda x: (lambda s: s - jnp.mean(s))(x[x > 0]),
            [("B", 3)],
            expect=["Sub:nonzero_0"],
        ),
        case("mask_grad", jax.grad(lambda x: jnp.sum(x[x > 0] ** 2)), [(6,)], expect=["NonZero"]),
        case(
            "mask_static",
            lambda x: x[np.array([True, False, True])],
            [(3,)],
            counts={"NonZero": 0},
        ),
    ],
)
family.add_cases(
    compress_p,
    lambda: [
        case(
            "axis",
            lambda c, x: jnp.compress(c > 0, x, axis=1),
            [(4,), ("B", 4)],
            expect=["Compress:Bxcompress_0"],
        ),
        case(
            "flat",
            lambda c, x: jnp.compress(c > 0, x),
            [(6,), (2, 3)],
            expect=["Compress:compress_0"],
        ),
        case(
            "int_condition",
            lambda c, x: jnp.compress(c, x, axis=-2),
            [("B",), ("B", 3)],
            dtypes=[_I32, _I32],
            expect=["Compress:compress_0x3"],
        ),
        case("short_condition", lambda c, x: jnp.compress(c > 0, x, axis=0), [(3,), (5, 2)]),
        case(
            "long_condition",
            lambda c, x: jnp.compress(c > 0, x),
            [np.array([1, -1, 1, 1, -1, -1, -1], _F32), (5,)],
            expect=["Compress:compress_0"],
        ),
        case("extract", lambda c, x: jnp.extract(c > 0, x), [(2, 3), (2, 3)], expect=["Compress"]),
        case(
            "grad",
            jax.grad(lambda x: jnp.sum(jnp.compress(x > 0, x) ** 2)),
            [("B",)],
            expect=["Compress"],
        ),
        case(
            "known_condition",
            lambda x: jnp.compress(np.array([True, False, True]), x, axis=1),
            [("B", 3)],
            expect=["Gather:Bx2"],
            counts={"Compress": 0},
        ),
        case(
            "known_condition_axis0",
            lambda x: jnp.compress(np.array([True, False, True]), x, axis=0),
            [np.arange(12, dtype=_F32).reshape(3, 4)],
            counts={"Compress": 0},
        ),
        case(
            "size_given",
            lambda c, x: jnp.compress(c > 0, x, size=2),
            [(4,), (4,)],
            counts={"Compress": 0},
        ),
    ],
)
family.add_cases(
    unique_p,
    lambda: [
        case(
            "float",
            lambda x: jnp.unique(jnp.round(x)),
            [("B", 4)],
            input_range=(-2.0, 2.0),
            expect=["Unique", "Gather:unique_0"],
        ),
        case("int", lambda *a: jnp.unique(*a), [(12,)], dtypes=[_I32], expect=["Gather:unique_0"]),
        case("flags_int", lambda x: jnp.unique(x, **_ALL), [("B", 3)], dtypes=[_I32]),
        case("flags_nan_zero", lambda x: jnp.unique(x, **_ALL), [_EDGES], expect=["IsNaN"]),
        case(
            "nan_distinct",
            lambda x: jnp.unique(x, equal_nan=False, **_ALL),
            [_EDGES],
            expect=["Unique"],
        ),
        case(
            "rows",
            lambda x: jnp.unique(x, axis=0, return_inverse=True, return_counts=True),
            [_ROWS],
            expect=["Gather:unique_0x2"],
        ),
        case(
            "columns_nan_zero",
            lambda x: jnp.unique(x, axis=1, return_index=True, return_counts=True),
            [_COLUMNS],
            expect=["Gather:3xunique_0"],
        ),
        case(
            "rows_symbolic",
            lambda x: jnp.unique(jnp.round(x), axis=0),
            [("B", 2)],
            input_range=(-1.0, 1.0),
            expect=["Unique"],
        ),
        case("bool", lambda *a: jnp.unique(*a), [("B",)], dtypes=[np.bool_], expect=["Unique"]),
        case("int8", lambda *a: jnp.unique(*a), [(9,)], dtypes=[np.int8], expect=["Unique"]),
        case(
            "uint64_above_2_63",  # keys wrap to int64 with the sign bit flipped
            lambda x: jnp.unique(x, return_inverse=True, return_counts=True),
            [np.array([2**64 - 1, 3, 2**63, 3, 0, 2**63 + 5, 2**63 - 1, 2**64 - 1], np.uint64)],
            variants=["f64"],
        ),
        case(
            "uint64_opset17",
            lambda x: jnp.unique(x, return_counts=True),
            [np.array([2**64 - 1, 3, 2**63, 3, 0, 2**63 + 5], np.uint64)],
            variants=["f64"],
            opset=17,
        ),
        case(
            "float16",
            lambda x: jnp.unique(jnp.round(x)),
            [(9,)],
            dtypes=[np.float16],
            input_range=(-2.0, 2.0),
        ),
        case(
            "inverse_shape",
            lambda x: jnp.unique(x, return_inverse=True)[1],
            [(3, 4)],
            dtypes=[_I32],
            expect=["Reshape:3x4"],
        ),
        case(
            "sum",
            lambda x: jnp.sum(jnp.unique(jnp.round(x))),
            [("B",)],
            input_range=(-3.0, 3.0),
            expect=["ReduceSum"],
        ),
        case(
            "grad",  # zero: no gradient flows through jnp.unique without size=, as in JAX
            jax.grad(lambda x: jnp.sum(jnp.unique(x) ** 2)),
            [(5,)],
            no_unused_inputs=False,
        ),
        # the Array API functions call jnp.unique with equal_nan=False: each NaN its own value
        case("unique_values", jnp.unique_values, [_EDGES], expect=["Gather:unique_0"]),
        case(
            "unique_values_symbolic",
            lambda x: jnp.unique_values(jnp.round(x)),
            [("B", 4)],
            input_range=(-2.0, 2.0),
            expect=["Gather:unique_0"],
        ),
        case("unique_counts", lambda x: tuple(jnp.unique_counts(x)), [_EDGES]),
        case(
            "unique_counts_int",
            lambda x: tuple(jnp.unique_counts(x)),
            [("B", 3)],
            dtypes=[_I32],
            expect=["Unique"],
        ),
        case(
            "unique_inverse",
            lambda x: tuple(jnp.unique_inverse(jnp.round(x))),
            [(3, 4)],
            input_range=(-2.0, 2.0),
            expect=["Reshape:3x4"],
        ),
        case("unique_all", lambda x: tuple(jnp.unique_all(x)), [_EDGES]),
        case(
            "unique_all_symbolic",
            lambda x: tuple(jnp.unique_all(x)),
            [("B", 2)],
            dtypes=[_I32],
            expect=["Unique"],
        ),
        # set operations that call jnp.unique without size= convert with it
        case(
            "intersect1d",
            lambda x, y: jnp.intersect1d(x, y, return_indices=True),
            [(8,), (6,)],
            dtypes=[_I32, _I32],
            expect=["Unique"],
        ),
        case("intersect1d_nan_zero", lambda x: jnp.intersect1d(x, x[:5]), [_EDGES]),
        case(
            "setxor1d",
            lambda *a: jnp.setxor1d(*a),
            [(7,), ("B",)],
            dtypes=[_I32, _I32],
            expect=["Unique"],
        ),
    ],
)
family.add_cases(
    arange_p,
    lambda: [
        case(
            "input_param",
            lambda x, *, n: x + jnp.arange(n) * 2,
            [()],
            dtypes=[_I32],
            input_params={"n": 5},
            expect=["Range", "Add:arange_0"],
        ),
        case(
            "scalar_input",
            lambda n: jnp.arange(n) * 2,
            [np.array(5, _I32)],
            expect=["Range", "Mul:arange_0"],
        ),
        case(
            "start_stop_step",
            lambda *a: jnp.arange(*a),
            [np.array(0.5, _F32), np.array(4.0, _F32), np.array(0.75, _F32)],
            expect=["Range"],
        ),
        case(
            "int_negative_step",
            lambda *a: jnp.arange(*a),
            [np.array(10, _I32), np.array(1, _I32), np.array(-3, _I32)],
            expect=["Range"],
        ),
        case(
            "dtype",
            lambda n: jnp.arange(1, n, dtype=jnp.float32),
            [np.array(6, _I32)],
            expect=["Range"],
        ),
        case("float_stop", lambda *a: jnp.arange(*a), [np.array(3.5, _F32)], expect=["Range"]),
        case(
            "empty",
            lambda *a: jnp.arange(*a),
            [np.array(5, _I32), np.array(2, _I32)],
            expect=["Range"],
        ),
        case(
            "from_data",
            lambda x: jnp.arange(jnp.sum(x > 0)) * 1.5,
            [("B", 3)],
            expect=["Range", "Mul:arange_0"],
        ),
        case(
            "grad",
            jax.grad(lambda s: jnp.sum(jnp.arange(s, 6.0, 0.5) ** 2)),
            [np.array(1.25, _F32)],
            no_unused_inputs=False,  # no gradient flows through jnp.arange, as in JAX
        ),
        case(
            "symbolic_dimension",
            lambda x: x + jnp.arange(x.shape[0]),
            [("B",)],
            dtypes=[_I32],
            expect=["Add:B"],
        ),
    ],
)


register = family.register
