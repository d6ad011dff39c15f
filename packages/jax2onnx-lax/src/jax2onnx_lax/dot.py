"""dot_general as MatMul (Gemm-free: ORT fuses MatMul+Add) or Einsum when nothing simpler fits."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.dtypes import onnx_dtype
from jax2onnx.plugin import case
from jax2onnx_lax._rules import rules

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _is_matmul(lhs_rank, rhs_rank, lc, rc, lb, rb):
    """True when MatMul computes dot_general directly (batch dims leading, K last/first)."""
    nb = len(lb)
    if (
        len(lc) != 1
        or len(rc) != 1
        or tuple(lb) != tuple(range(nb))
        or tuple(rb) != tuple(range(nb))
    ):
        return False
    if lc[0] != lhs_rank - 1:
        return False
    if nb == 0:
        return rhs_rank in (1, 2) and rc[0] == 0 and lhs_rank >= 1
    return rhs_rank == nb + 2 and rc[0] == nb and lhs_rank == nb + 2


@rules.lowering(
    lax.dot_general_p,
    cases=[
        case("matmul", jnp.matmul, [("B", 4), (4, 5)], expect=["MatMul:Bx5"]),
        case("matvec", jnp.dot, [(3, 4), (4,)], expect=["MatMul:3"]),
        case(
            "batched",
            lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
            [("B", 2, 3), ("B", 3, 4)],
            expect=["MatMul:Bx2x4"],
        ),
        case("rank3_by_matrix", jnp.matmul, [("B", "T", 4), (4, 6)], expect=["MatMul:BxTx6"]),
        case("transposed_rhs", lambda x, w: x @ w.T, [(3, 4), (5, 4)]),
        case("contract_first", lambda a, b: jnp.einsum("ki,kj->ij", a, b), [(4, 3), (4, 2)]),
        case(
            "int32",
            jnp.matmul,
            [
                np.arange(6, dtype=np.int32).reshape(2, 3),
                np.arange(6, dtype=np.int32).reshape(3, 2),
            ],
        ),
    ],
)
def dot_general(ctx, lhs, rhs, *, dimension_numbers, preferred_element_type=None, **_):
    """MatMul when the layout allows it, otherwise one Einsum."""
    (lc, rc), (lb, rb) = dimension_numbers
    lhs_aval, rhs_aval = ctx.avals_in
    out_dtype = ctx.avals_out[0].dtype
    if lhs_aval.dtype != out_dtype:
        lhs = ctx.op.Cast(lhs, to=onnx_dtype(out_dtype))
    if rhs_aval.dtype != out_dtype:
        rhs = ctx.op.Cast(rhs, to=onnx_dtype(out_dtype))
    if _is_matmul(lhs_aval.ndim, rhs_aval.ndim, lc, rc, lb, rb):
        return ctx.op.MatMul(lhs, rhs)
    lhs_sub = list(_LETTERS[: lhs_aval.ndim])
    rhs_sub = [""] * rhs_aval.ndim
    for l_axis, r_axis in zip((*lc, *lb), (*rc, *rb)):
        rhs_sub[r_axis] = lhs_sub[l_axis]
    fresh = iter(_LETTERS[lhs_aval.ndim :])
    rhs_sub = [s or next(fresh) for s in rhs_sub]
    out = [lhs_sub[a] for a in lb]
    out += [lhs_sub[a] for a in range(lhs_aval.ndim) if a not in lc and a not in lb]
    out += [rhs_sub[a] for a in range(rhs_aval.ndim) if a not in rc and a not in rb]
    equation = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(out)}"
    return ctx.op.Einsum(lhs, rhs, equation=equation)
