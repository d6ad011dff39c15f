"""Flax NNX ``Embed`` as macro primitives: the lookup and ``attend``.

The stand-ins promote the table with flax's ``promote_dtype`` at conversion time
(``inexact=False`` for the lookup, as flax does) and bind ``flax.embed`` on
``(indices, table)`` or ``flax.embed_attend`` on ``(query, table)``. A call
flax answers differently (``num_embeddings == 1`` broadcasts, ``out_sharding``,
float indices, which flax rejects) runs the original method. Batching is
explicit (the vmapped axis of the indices or query moves to the front and the
same primitive binds again); JVPs are JAX's derivative of ``impl`` (the lookup
has no tangent with respect to integer indices).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, at_conversion, case
from jax2onnx_flax._util import FLOATS, module_factory, promoted, x_batched

family = Family("flax")
register = family.register

# -- nnx.Embed -------------------------------------------------------------------


def _embed(indices, table):
    return jnp.take(table, indices, axis=0)


def _bind_embed(indices, table):
    return embed_p.bind(indices, table), 0


embed_p = family.primitive(
    "embed", impl=_embed, batching=x_batched(_embed, _bind_embed), jvp="fallback"
)


def _embed_binder(original):
    @functools.wraps(original)
    def call(self, inputs, out_sharding=None):
        if (
            out_sharding is not None
            or self.num_embeddings == 1
            or not jnp.issubdtype(jnp.result_type(inputs), jnp.integer)
        ):
            return original(self, inputs, out_sharding=out_sharding)
        (table,) = at_conversion(
            self.promote_dtype, (self.embedding[...],), dtype=self.dtype, inexact=False
        )
        return embed_p.bind(jnp.asarray(inputs), table)

    return call


family.intercept("flax.nnx.Embed.__call__", embed_p, binder=_embed_binder)


def _attend(query, table, *, precision=None):
    return jnp.dot(query, table.T, precision=precision)


def _bind_attend(query, table, **params):
    return attend_p.bind(query, table, **params), 0


attend_p = family.primitive(
    "embed_attend", impl=_attend, batching=x_batched(_attend, _bind_attend), jvp="fallback"
)


def _attend_binder(original):
    @functools.wraps(original)
    def call(self, query, out_sharding=None):
        if out_sharding is not None:
            return original(self, query, out_sharding=out_sharding)
        query, table = promoted(self, (query, self.embedding[...]))
        return attend_p.bind(query, table)

    return call


family.intercept("flax.nnx.Embed.attend", attend_p, binder=_attend_binder)


def _embed_model(nnx):
    return nnx.Embed(num_embeddings=6, features=4, rngs=nnx.Rngs(0))


_F32_TOLERANCE = (1e-5, 1e-5)
_EDGE_INDICES = np.array([[0, 5, -1, -6, -7, 6], [100, -100, 3, 2, 1, 0]], np.int32)
_I32 = [np.int32]

family.add_cases(
    embed_p,
    lambda: [
        case(
            "embed_lookup",
            module_factory(_embed_model),
            [("B", 3)],
            dtypes=_I32,
            input_range=(0, 6),
            factory=True,
            expect=["Gather -> Where:Bx3x4"],
        ),
        case(
            # a bfloat16 lookup (dtype) of the float32 table (param_dtype)
            "embed_dtype_bfloat16",
            module_factory(lambda nnx: nnx.Embed(6, 4, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))),
            [("B", 3)],
            dtypes=_I32,
            input_range=(0, 6),
            factory=True,
            variants=["bf16"],
            expect=["Gather -> Cast -> Where"],  # ONNX Runtime has no bfloat16 Where
        ),
        case(
            "embed_out_of_range",
            module_factory(_embed_model),
            [_EDGE_INDICES],
            factory=True,
            expect=["Gather -> Where:2x6x4"],
        ),
        case(
            "embed_int64_indices",
            module_factory(_embed_model),
            [np.array([[1, -2, 7]], np.int64)],
            factory=True,
            expect=["Gather"],
            variants=["f64"],
        ),
        case(
            "embed_uint8_indices",
            module_factory(_embed_model),
            [np.array([0, 5, 6, 255], np.uint8)],
            factory=True,
            expect=["Gather"],
        ),
        case(
            "embed_vmap",
            module_factory(_embed_model, jax.vmap),
            [("B", 2, 3)],
            dtypes=_I32,
            input_range=(-8, 8),
            factory=True,
            expect=["Gather -> Where:Bx2x3x4"],
        ),
    ],
)


@family.lowering(embed_p)
def embed(ctx, indices, table):
    """One Gather of the table; out-of-range rows are JAX's fill value.

    ``jnp.take`` wraps negative indices in ``[-n, 0)`` (as Gather does) and fills
    rows of indices outside ``[-n, n)`` with NaN (the lowest value for signed
    integer tables, the highest for unsigned). Gather has no such mode, so the
    indices are clamped into range (Where) and the fill is applied after the
    Gather (Where on the row's validity).
    """
    idx_dtype = np.dtype(ctx.avals_in[0].dtype)
    table_dtype = np.dtype(ctx.avals_in[1].dtype)
    n = int(ctx.avals_in[1].shape[0])
    if idx_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        indices = ctx.cast(indices, np.int64)
        idx_dtype = np.dtype(np.int64)
    valid = ctx.op.Less(indices, np.asarray(n, idx_dtype))
    if np.dtype(ctx.avals_in[0].dtype).kind == "i":
        valid = ctx.op.And(valid, ctx.op.GreaterOrEqual(indices, np.asarray(-n, idx_dtype)))
    safe = ctx.op.Where(valid, indices, np.zeros((), idx_dtype))
    rows = ctx.op.Gather(table, safe, axis=0)
    if table_dtype.kind == "f":
        fill = np.asarray(np.nan, table_dtype)
    elif table_dtype.kind == "i":
        fill = np.asarray(np.iinfo(table_dtype).min, table_dtype)
    else:
        fill = np.asarray(np.iinfo(table_dtype).max if table_dtype.kind == "u" else True)
    mask = ctx.op.Unsqueeze(valid, ctx.i64([-1]))
    return ctx.where(mask, rows, fill.astype(table_dtype), dtype=table_dtype)


family.add_cases(
    attend_p,
    lambda: [
        case(
            "attend_2d",
            module_factory(_embed_model, lambda m: m.attend),
            [("B", 4)],
            factory=True,
            expect=["Gemm:Bx6"],
            counts={"Transpose": 0, "MatMul": 0},
            variants=["f32", "f64", "bf16"],  # a bfloat16 query promotes to the float32 table
        ),
        case(
            "attend_3d",
            module_factory(_embed_model, lambda m: m.attend),
            [("B", 5, 4)],
            factory=True,
            expect=["Reshape -> Gemm -> Reshape:Bx5x6"],
            counts={"Transpose": 0, "MatMul": 0},
        ),
        case(
            "attend_vmap",
            module_factory(_embed_model, lambda m: jax.vmap(lambda q: m.attend(q))),
            [("B", 4)],
            factory=True,
            expect=["Gemm:Bx6"],
            counts={"Transpose": 0},
        ),
        case(
            "attend_grad",
            module_factory(_embed_model, lambda m: jax.grad(lambda q: (m.attend(q) ** 2).sum())),
            [(3, 4)],
            factory=True,
            # the table stays float32 (param_dtype), so flax casts a float64
            # query down and both sides compute in float32
            tolerances={"float64": _F32_TOLERANCE},
        ),
    ],
)


@family.lowering(attend_p, native_dtypes=FLOATS)
def attend(ctx, query, table, *, precision=None):
    """``query @ table.T`` as Gemm(transB=1): the table is used as stored, never copied.

    Queries of other ranks reshape to 2-D around the Gemm (``[-1, features]``
    and back, symbolic dims included) rather than transposing the table.
    """
    q_aval = ctx.avals_in[0]
    if q_aval.ndim == 2:
        return ctx.op.Gemm(query, table, transB=1)
    features = int(q_aval.shape[-1])
    flat = ctx.op.Reshape(query, ctx.i64([-1, features]))
    y = ctx.op.Gemm(flat, table, transB=1)
    return ctx.op.Reshape(y, _target_shape(ctx, ctx.avals_out[0].shape))


def _target_shape(ctx, dims):
    """A Reshape target: a constant with ``-1`` when one dimension is symbolic."""
    symbolic = [i for i, d in enumerate(dims) if not isinstance(d, (int, np.integer))]
    if len(symbolic) == 1:
        target = [-1 if i == symbolic[0] else int(d) for i, d in enumerate(dims)]
        return ctx.i64(target)
    return ctx.shape(dims)
