"""dot_general as MatMul (Gemm for a transposed 2-D operand), Mul or, rarely, Einsum.

Gemm fusion with a following bias add is left out: a lowering sees only its own
equation, and ONNX Runtime fuses MatMul + Add itself.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, has_kernel
from jax2onnx_lax._util import reshape

family = Family("lax")

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_INT8 = frozenset(np.dtype(t) for t in (np.int8, np.uint8))


def compute_dtype(dtype) -> np.dtype:
    """The dtype ONNX Runtime multiplies ``dtype`` in: itself, or an exact wider one.

    Narrow integers and bool widen to 32 bits: the low bits of a wrapping 32-bit
    sum equal JAX's wrapping narrow sum, and bool sums of 0/1 are non-zero exactly
    when JAX's logical "or of ands" is true. Floats (bfloat16 and float16 too) stay.
    """
    dtype = np.dtype(dtype)
    if has_kernel("MatMul", dtype):
        return dtype
    if dtype.kind == "u":
        return np.dtype(np.uint32)
    return np.dtype(np.int32)


def _prod(dims):
    result = 1
    for d in dims:
        result = result * d
    return result


def _transposes(ctx, x, perm):
    return int(perm != list(range(len(perm))) and x.const_value is None)


def _dg(lc, rc, lb=(), rb=(), **kw):
    return lambda a, b: lax.dot_general(a, b, ((lc, rc), (lb, rb)), **kw)


_I8 = [np.int8, np.int8]
_NO_AUX = {"Einsum": 0, "Transpose": 0, "Reshape": 0}
_W54 = np.linspace(-1.0, 1.0, 20, dtype=np.float32).reshape(5, 4)


@family.lowering(
    lax.dot_general_p,
    cases=lambda: [
        case(
            "matmul",
            jnp.matmul,
            [("B", 4), (4, 5)],
            expect=["MatMul:Bx5"],
            counts=_NO_AUX,
            variants=["f32", "f64", "bf16", "f16"],
        ),
        case("matvec", jnp.dot, [(3, 4), (4,)], expect=["MatMul:3"], counts=_NO_AUX),
        case("vecmat", jnp.dot, [(4,), (4, 5)], expect=["MatMul:5"], counts=_NO_AUX),
        case("vecvec", jnp.dot, [(4,), (4,)], expect=["MatMul"], counts=_NO_AUX),
        case("outer", _dg((), ()), [("B",), (4,)], expect=["Unsqueeze -> Mul:Bx4"]),
        case(
            "batched_outer",
            _dg((), (), (0,), (0,)),
            [("B", 2), ("B", 3, 2)],
            expect=["Mul:Bx2x3x2"],
            counts={"MatMul": 0, "Einsum": 0},
        ),
        case(
            "batched",
            lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
            [("B", 2, 3), ("B", 3, 4)],
            expect=["MatMul:Bx2x4"],
            counts=_NO_AUX,
        ),
        case(
            "batched_matvec",
            _dg((2,), (1,), (0,), (0,)),
            [("B", 2, 3), ("B", 3)],
            expect=["MatMul -> Squeeze:Bx2"],
            counts={"Einsum": 0, "Transpose": 0},
        ),
        case(
            "batched_vecmat",
            _dg((1,), (1,), (0,), (0,)),
            [("B", 3), ("B", 3, 4)],
            expect=["MatMul -> Squeeze:Bx4"],
            counts={"Einsum": 0, "Transpose": 0},
        ),
        case(
            "batch_not_leading",
            _dg((2,), (1,), (1,), (0,)),
            [(4, "B", 3), ("B", 3, 5)],
            expect=["Transpose -> MatMul:Bx4x5"],
            counts={"Einsum": 0, "Transpose": 1},
        ),
        case(
            "two_batch_dims",
            _dg((3,), (2,), (0, 1), (0, 1)),
            [("B", 2, 3, 4), ("B", 2, 4, 5)],
            expect=["MatMul:Bx2x3x5"],
            counts=_NO_AUX,
        ),
        case(
            "batched_many_free",
            _dg((3,), (1,), (0,), (0,)),
            [("B", 2, 3, 4), ("B", 4, 5)],
            expect=["Unsqueeze -> MatMul:Bx2x3x5"],
            counts=_NO_AUX,
        ),
        case(
            "batched_many_rhs_free",
            _dg((2,), (1,), (0,), (0,)),
            [("B", 2, 3), ("B", 3, 4, 5)],
            expect=["MatMul -> Reshape:Bx2x4x5"],
            counts={"Einsum": 0, "Transpose": 0},
        ),
        case(
            "rank3_by_matrix",
            jnp.matmul,
            [("B", "T", 4), (4, 6)],
            expect=["MatMul:BxTx6"],
            counts=_NO_AUX,
        ),
        case(
            "transposed_rhs_gemm",
            _dg((1,), (1,)),
            [("B", 4), (5, 4)],
            expect=["Gemm:Bx5"],
            counts={"Transpose": 0, "MatMul": 0},
        ),
        case(
            "transposed_const_rhs",
            lambda x: lax.dot_general(x, _W54, (((1,), (1,)), ((), ()))),
            [("B", 4)],
            expect=["MatMul:Bx5"],
            counts={"Transpose": 0, "Gemm": 0},
        ),
        case("x_at_w_T", lambda x, w: x @ w.T, [(3, 4), (5, 4)], counts={"Einsum": 0}),
        case(
            "contract_first_gemm",
            lambda a, b: jnp.einsum("ki,kj->ij", a, b),
            [(4, 3), (4, 2)],
            expect=["Gemm:3x2"],
            counts={"Transpose": 0},
        ),
        case(
            "multi_contract",
            _dg((1, 2), (0, 1)),
            [("B", 4, 5), (4, 5, 6)],
            expect=["Reshape -> MatMul:Bx6"],
            counts={"Einsum": 0, "Transpose": 0},
        ),
        case(
            "batched_multi_contract",
            _dg((2, 3), (1, 2), (0,), (0,)),
            [("B", 3, 4, 2), ("B", 4, 2, 5)],
            expect=["MatMul:Bx3x5"],
            counts={"Einsum": 0, "Transpose": 0},
        ),
        case(
            "scrambled_einsum",
            _dg((2, 3), (1, 0), (1,), (2,)),
            [(3, "B", 4, 5), (5, 4, "B", 6)],
            expect=["Einsum:Bx3x6"],
            counts={"MatMul": 0},
        ),
        case(
            "int32",
            jnp.matmul,
            [
                np.arange(6, dtype=np.int32).reshape(2, 3),
                np.arange(6, dtype=np.int32).reshape(3, 2),
            ],
            expect=["MatMul:2x2"],
            counts={"Cast": 0},
        ),
        case(
            "int32_transposed_rhs",
            _dg((1,), (1,)),
            [(3, 4), (5, 4)],
            dtypes=[np.int32, np.int32],
            expect=["Transpose -> MatMul:3x5"],
        ),
        case(
            "transposed_matvec",
            lambda x, v: jnp.einsum("ji,j->i", x, v),
            [(4, 3), (4,)],
            expect=["MatMul:3"],
            counts={"Transpose": 0},
        ),
        case(
            "transposed_3d_vec",
            lambda x, v: jnp.einsum("ijk,j->ik", x, v),
            [("B", 3, 5), (3,)],
            expect=["Transpose -> MatMul -> Squeeze:Bx5"],
        ),
        case("int64", jnp.matmul, [(3, 4), (4, 2)], dtypes=[np.int64] * 2, variants=["f64"]),
        case(
            "int8_wraps",
            jnp.matmul,
            [(3, 8), (8, 2)],
            dtypes=_I8,
            input_range=(-128, 128),
            expect=["MatMulInteger -> Cast:3x2"],
        ),
        case(
            "int8_to_int32",
            _dg((1,), (0,), preferred_element_type=jnp.int32),
            [(3, 8), (8, 2)],
            dtypes=_I8,
            input_range=(-128, 128),
            expect=["MatMulInteger:3x2"],
            counts={"Cast": 0},
        ),
        case(
            "int8_to_float32",
            _dg((1,), (0,), preferred_element_type=jnp.float32),
            [("B", 8), (8, 2)],
            dtypes=_I8,
            input_range=(-128, 128),
        ),
        case(
            "uint8_batched_einsum",
            lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
            [(2, 3, 8), (2, 8, 2)],
            dtypes=[np.uint8, np.uint8],
            input_range=(0, 256),
        ),
        case("int16", jnp.matmul, [(3, 4), (4, 2)], dtypes=[np.int16] * 2, input_range=(-300, 300)),
        case("bool", jnp.dot, [(3, 4), (4, 2)], dtypes=[np.bool_] * 2),
        case(
            "bf16_to_float32",
            _dg((1,), (0,), preferred_element_type=jnp.float32),
            [(3, 4), (4, 2)],
            variants=["bf16"],
        ),
        case(  # XLA multiplies float32 operands in float32 and rounds the sums once
            "float32_to_bf16",
            _dg((1,), (0,), preferred_element_type=jnp.bfloat16),
            [(3, 64), (64, 2)],
            variants=["f32"],
        ),
        case(
            "bf16_gemm_transposed",
            _dg((0,), (1,)),
            [(4, 3), (2, 4)],
            variants=["bf16"],
        ),
        case(
            "f16_to_float32",
            _dg((1,), (0,), preferred_element_type=jnp.float32),
            [(3, 4), (4, 2)],
            dtypes=[np.float16] * 2,
            expect=["Cast -> MatMul:3x2"],
        ),
        case("f16", jnp.matmul, [(3, 4), (4, 2)], dtypes=[np.float16] * 2),
    ],
)
def dot_general(ctx, lhs, rhs, *, dimension_numbers, preferred_element_type=None, **_):
    """dot_general -> MatMul on operands brought to (batch, free, contract) layouts.

    Transposes only where an operand's axes are out of order (constants are
    permuted at conversion time), Reshapes only to merge several contracting or
    rhs-free axes, Unsqueeze/Squeeze for missing free axes of batched operands.
    A 2-D product whose operand is contracted on the "wrong" axis is one Gemm with
    transA/transB; no contracting axis is a broadcasting Mul (outer product); an
    Einsum only where the MatMul form would need three or more helper nodes.
    int8/uint8 operands use MatMulInteger (exact int32 sums); other types ONNX
    Runtime cannot multiply are widened exactly (see ``compute_dtype``).
    """
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = (list(map(int, a)) for a in (lc, rc, lb, rb))
    lhs_aval, rhs_aval = ctx.avals_in
    out_aval = ctx.avals_out[0]
    out_dtype = np.dtype(out_aval.dtype)
    work = compute_dtype(out_dtype)
    in_dtype = np.dtype(lhs_aval.dtype)
    if (
        in_dtype == np.dtype(rhs_aval.dtype)
        and jnp.issubdtype(out_dtype, jnp.floating)
        and jnp.issubdtype(in_dtype, jnp.floating)
        and in_dtype.itemsize > out_dtype.itemsize
    ):
        # a narrower preferred_element_type on equal operand types: XLA multiplies at the
        # operands' precision and rounds once (mixed operand types are converted to the
        # output type first, as JAX's CPU lowering does)
        work = compute_dtype(in_dtype)
    lfree = [a for a in range(lhs_aval.ndim) if a not in lc and a not in lb]
    rfree = [a for a in range(rhs_aval.ndim) if a not in rc and a not in rb]
    lperm, rperm = lb + lfree + lc, rb + rc + rfree
    nb, nm, nk, nn = len(lb), len(lfree), len(lc), len(rfree)
    integer8 = (
        np.dtype(lhs_aval.dtype) in _INT8
        and np.dtype(rhs_aval.dtype) in _INT8
        and out_dtype.kind in "iub"
        and out_dtype.itemsize <= 4
    )
    if integer8:
        work = np.dtype(np.int32)

    def widen(x):
        return x if integer8 else ctx.cast(x, work)

    def finish(y):
        return ctx.cast(y, out_dtype)

    if nk == 0:  # outer product, batched or not
        a = ctx.transpose(widen(lhs), lperm)
        b = ctx.transpose(widen(rhs), rperm)
        if nn:
            a = ctx.op.Unsqueeze(a, ctx.i64(list(range(nb + nm, nb + nm + nn))))
        if nm:
            b = ctx.op.Unsqueeze(b, ctx.i64(list(range(nb, nb + nm))))
        if integer8:
            a, b = ctx.cast(a, work), ctx.cast(b, work)
        return finish(ctx.op.Mul(a, b))

    if nb == 0 and lhs_aval.ndim == 2 and rhs_aval.ndim == 2 and ctx.has_kernel("Gemm", work):
        trans_a, trans_b = lc == [0], rc == [1]
        if (trans_a and lhs.const_value is None) or (trans_b and rhs.const_value is None):
            a, b = widen(lhs), widen(rhs)
            return finish(ctx.op.Gemm(a, b, transA=int(trans_a), transB=int(trans_b)))

    unsqueezes = (nb > 0) * ((nm == 0) + (nn == 0) + (nm > 1))
    helpers = _transposes(ctx, lhs, lperm) + _transposes(ctx, rhs, rperm) + unsqueezes
    helpers += (nk > 1) + (nk > 1 or nn > 1) + (nn > 1) + (nb > 0 and 0 in (nm, nn))
    if helpers >= 3 and ctx.has_kernel("Einsum", work) and not integer8:
        return finish(_einsum(ctx, widen(lhs), widen(rhs), lc, rc, lb, rb))

    a = ctx.transpose(widen(lhs), lperm)
    b = ctx.transpose(widen(rhs), rperm)
    lshape = [lhs_aval.shape[i] for i in lperm]
    batch, m_dims = lshape[:nb], lshape[nb : nb + nm]
    k_dims = lshape[nb + nm :]
    n_dims = [rhs_aval.shape[i] for i in rfree]
    if nk > 1:
        a = reshape(ctx, a, [*batch, *m_dims, _prod(k_dims)], keep=nb + nm)
    if nk > 1 or nn > 1:
        merged_n = [_prod(n_dims)] if nn else []
        b = reshape(ctx, b, [*batch, _prod(k_dims), *merged_n], keep=nb)
    squeeze = []
    if nb and nm == 0:
        a = ctx.op.Unsqueeze(a, ctx.i64([nb]))
        squeeze.append(nb)
    if nb and nn == 0:
        b = ctx.op.Unsqueeze(b, ctx.i64([nb + 1]))
        squeeze.append(nb + max(nm, 1))
    if nb and nm > 1:
        b = ctx.op.Unsqueeze(b, ctx.i64(list(range(nb, nb + nm - 1))))
    if nb == 0 and nn == 0 and lperm != sorted(lperm):
        # ONNX Runtime's Transpose+MatMul fusion gets a 1-D right operand wrong (1.31/1.32):
        # x.T @ v is v @ x; otherwise the vector becomes a [K, 1] matrix
        if lhs_aval.ndim == 2 and nk == 1 and not integer8:
            return finish(ctx.op.MatMul(b, widen(lhs)))
        b = ctx.op.Unsqueeze(b, ctx.i64([1]))
        squeeze.append(nm)
    y = ctx.op.MatMulInteger(a, b) if integer8 else ctx.op.MatMul(a, b)
    if nn > 1:
        y = reshape(ctx, y, out_aval.shape, keep=nb + nm)
    elif squeeze:
        y = ctx.op.Squeeze(y, ctx.i64(squeeze))
    return finish(y)


def _einsum(ctx, lhs, rhs, lc, rc, lb, rb):
    lhs_rank, rhs_rank = ctx.avals_in[0].ndim, ctx.avals_in[1].ndim
    lhs_sub = list(_LETTERS[:lhs_rank])
    rhs_sub = [""] * rhs_rank
    for l_axis, r_axis in zip((*lc, *lb), (*rc, *rb)):
        rhs_sub[r_axis] = lhs_sub[l_axis]
    fresh = iter(_LETTERS[lhs_rank:])
    rhs_sub = [s or next(fresh) for s in rhs_sub]
    out = [lhs_sub[a] for a in lb]
    out += [lhs_sub[a] for a in range(lhs_rank) if a not in lc and a not in lb]
    out += [rhs_sub[a] for a in range(rhs_rank) if a not in rc and a not in rb]
    equation = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(out)}"
    return ctx.op.Einsum(lhs, rhs, equation=equation)


register = family.register
