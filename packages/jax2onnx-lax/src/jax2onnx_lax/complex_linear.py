"""Products on complex values (``values="complex"``): ``mul``, ``dot_general``, convolutions.

The elementwise product ``(a + ib)(c + id)`` is ``z * c + swap(z) * (-d, d)`` on
the stored pairs: ``swap`` reverses the parts axis, ``c`` and ``(-d, d)`` come
from the other operand, and each output part is the same two products, summed
as ``a c - b d`` and ``a d + b c`` are (``x + (-y)`` is ``x - y`` bit for bit), so
the form is exact. With the other operand constant or loop-invariant its two
factors fold or leave the loop, and the product is 4 ONNX nodes, not 7 (Split,
four Mul, Sub, Add, Concat).

Complex arrays are stored as float ``[..., 2]`` (real, imaginary). A complex
matrix product is one real ``dot_general`` on a block form: the right operand
``y = yr + i yi`` becomes ``[[yr, yi], [-yi, yr]]`` (a new axis ``q`` next to its
contracting axes, the parts axis ``p`` last), and the left operand's parts
axis is contracted with ``q``: ``out[..., p] = sum_q x[..., q] * Y[q, p]``,
which is ``xr yr - xi yi`` for ``p = 0`` and ``xr yi + xi yr`` for ``p = 1``. For
a plain matmul both operands flatten into one ``MatMul`` of twice the size,
and a constant right operand (a weight) folds to a constant block matrix.
A real operand against a complex one is one real product with the parts axis
carried as a free axis.

Convolutions are four real convolutions of the parts (``feature_group_count``
and ``batch_group_count`` act on each alike), combined as a complex product.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx import onnx_function
from jax2onnx.plugin import Family, case, stored_type
from jax2onnx_lax._complex import join, parts

family = Family("lax")

_C = [np.complex64]
_CC = [np.complex64, np.complex64]
_W = (
    np.linspace(-1.0, 1.0, 12).reshape(4, 3) + 1j * np.linspace(0.5, -0.5, 12).reshape(4, 3)
).astype(np.complex64)


def _part_dtype(dtype):
    return None if dtype is None else stored_type(np.dtype(dtype), ())[0]


_MUL_EDGES = [
    np.array([0j, -0.0 + 0j, 1e18 + 3e17j, np.inf + 0j, 1 + 2j, -3 - 1j, 1e-30j, 2], np.complex64),
    np.array([-0.0 - 0j, 5 + 0j, 1e10 - 2e9j, 0j, np.nan + 1j, 2 - 0.5j, 1e-30, -0j], np.complex64),
]


def _parts_of(z):
    return lax.real(z), lax.imag(z)


def _static(value, depth: int = 6) -> bool:
    """Whether ``value`` is computed from constants only (a few producers deep)."""
    if value.const_value is not None:
        return True
    node = value.producer()
    if depth == 0 or node is None or not node.inputs:
        return False
    return all(v is None or _static(v, depth - 1) for v in node.inputs)


@family.lowering(
    lax.mul_p,
    values="complex",
    cases=lambda: [
        case(
            "complex_mul",
            lax.mul,
            [("B", 3), ("B", 3)],
            dtypes=_CC,
            expect=["Slice -> Mul -> Add:Bx3x2"],
            counts={"Mul": 3, "Add": 1, "Slice": 3},
        ),
        case("complex_mul_vmap", jax.vmap(lax.mul), [(2, 3), (2, 3)], dtypes=_CC),
        case(
            "complex_mul_constant",
            lambda z: jnp.asarray(_W[0]) * z * 2.0,
            [("B", 3)],
            dtypes=_C,
            counts={"Mul": 4, "Add": 2, "Slice": 2, "Split": 0, "Concat": 0},
        ),
        # parts compared as real outputs: infinities, NaNs and signed zeros in both operands
        case("complex_mul_edges", lambda x, y: _parts_of(lax.mul(x, y)), _MUL_EDGES),
    ],
)
def mul(ctx, x, y, **_):
    """mul -> ``z * re(w) + swap(z) * (-im(w), im(w))`` with ``w`` the constant side, if any."""
    z, w = (y, x) if _static(x) and not _static(y) else (x, y)
    parts_axis = ctx.i64([-1])
    re_w = ctx.op.Slice(w, ctx.i64([0]), ctx.i64([1]), parts_axis)
    im_w = ctx.op.Slice(w, ctx.i64([1]), ctx.i64([2]), parts_axis)
    dtype = np.dtype(ctx.stored_aval(ctx.avals_in[0]).dtype)
    signed = ctx.op.Mul(im_w, ctx.const(np.array([-1.0, 1.0], dtype), dtype))
    swapped = ctx.op.Slice(z, ctx.i64([1]), ctx.i64([-3]), parts_axis, ctx.i64([-1]))
    return ctx.op.Add(ctx.op.Mul(z, re_w), ctx.op.Mul(swapped, signed))


def _shift(dims, q):
    return tuple(d + (d >= q) for d in dims)


def _dot_complex(x, y, *, dimension_numbers, **kw):
    """Both complex: one real product with the block form of ``y`` (module docstring).

    When the last axis of ``x`` is contracted, its parts axis merges with it and ``q``
    with its partner in ``y`` (one axis of twice the size each), so a matmul stays one
    ``MatMul``; otherwise both are contracted as axes of their own.
    """
    (lc, rc), (lb, rb) = dimension_numbers
    n, m = x.ndim - 1, y.ndim - 1
    last = lc.index(n - 1) if n - 1 in lc else None
    q = rc[last] + 1 if last is not None else max(rc) + 1 if rc else m
    yr, yi = parts(y)
    block = jnp.stack([y, join(-yi, yr)], axis=q)
    if last is None:
        dnums = (((*lc, n), (*_shift(rc, q), q)), (lb, _shift(rb, q)))
        return lax.dot_general(x, block, dnums, **kw)
    x = x.reshape(*x.shape[: n - 1], x.shape[n - 1] * 2)
    block = block.reshape(*block.shape[: q - 1], block.shape[q - 1] * 2, *block.shape[q + 1 :])
    return lax.dot_general(x, block, dimension_numbers, **kw)


def _dot_real_lhs(x, y, *, dimension_numbers, **kw):
    """Real times complex: the parts axis of ``y`` is its last free axis, last in the result."""
    return lax.dot_general(x.astype(y.dtype), y, dimension_numbers, **kw)


def _dot_real_rhs(x, y, *, dimension_numbers, **kw):
    """Complex times real: the parts axis of ``x`` is a free axis. Without free axes of
    ``y`` the product is taken as ``y . x`` (result axes already in JAX's order);
    otherwise the parts axis is moved last."""
    (lc, rc), (lb, rb) = dimension_numbers
    y = y.astype(x.dtype)
    if len(rc) + len(rb) == y.ndim:
        return lax.dot_general(y, x, ((rc, lc), (rb, lb)), **kw)
    out = lax.dot_general(x, y, dimension_numbers, **kw)
    return jnp.moveaxis(out, x.ndim - 1 - len(lc), -1)


def _dg(lc, rc, lb=(), rb=()):
    return lambda a, b: lax.dot_general(a, b, ((lc, rc), (lb, rb)))


@family.lowering(
    lax.dot_general_p,
    values="complex",
    cases=lambda: [
        case(
            "complex_matmul",
            jnp.matmul,
            [("B", 4), (4, 3)],
            dtypes=_CC,
            expect=["MatMul"],
            counts={"MatMul": 1, "Transpose": 0},
        ),
        case(
            "complex_weight",
            lambda z: z @ _W,
            [("B", 4)],
            dtypes=_C,
            counts={"MatMul": 1, "Transpose": 0},
        ),
        case("complex_batched", jnp.matmul, [("B", 2, 4), ("B", 4, 3)], dtypes=_CC),
        case("complex_dot_vec", jnp.dot, [(4,), (4,)], dtypes=_CC),
        case("complex_matvec", jnp.dot, [(3, 4), (4,)], dtypes=_CC),
        case("complex_outer_dot", _dg((), ()), [(2,), (3,)], dtypes=_CC),
        case("complex_contract_lead", _dg((0,), (1,)), [(4, 2), (3, 4)], dtypes=_CC),
        case("complex_vdot", jnp.vdot, [(2, 3), (2, 3)], dtypes=_CC),
        case(
            "complex_einsum",
            lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
            [(2, 3, 4), (2, 4, 2)],
            dtypes=_CC,
        ),
        case("complex_einsum_trace", lambda a: jnp.einsum("ii->", a), [(3, 3)], dtypes=_C),
        case(
            "complex_real_lhs",
            jnp.matmul,
            [("B", 4), (4, 3)],
            dtypes=[np.float32, np.complex64],
            counts={"Transpose": 0},
        ),
        case("complex_real_rhs", jnp.matmul, [("B", 4), (4, 3)], dtypes=[np.complex64, np.float32]),
        case("complex_real_rhs_vec", jnp.dot, [(3, 4), (4,)], dtypes=[np.complex64, np.float32]),
        case(
            "complex_matmul_grad",
            jax.grad(lambda a, b: jnp.sum(jnp.real(a @ b) ** 2), argnums=1),
            [(2, 4), (4, 3)],
            dtypes=_CC,
        ),
        case(
            "complex_vmap_dot",
            jax.vmap(jnp.dot),
            [("B", 3), ("B", 3)],
            dtypes=_CC,
        ),
    ],
)
def dot_general(ctx, x, y, *, dimension_numbers, preferred_element_type=None, **params):
    """Two complex operands: one real product with the block form of the right one;
    one real operand: one real product with the parts axis as a free axis."""
    lhs, rhs = (np.dtype(a.dtype).kind == "c" for a in ctx.avals_in)
    fn = _dot_complex if lhs and rhs else _dot_real_rhs if lhs else _dot_real_lhs
    pet = _part_dtype(preferred_element_type)
    kw = dict(dimension_numbers=dimension_numbers, preferred_element_type=pet, **params)
    return ctx.decompose(fn, x, y, stored=True, **kw)


def _plane(x):
    re, im = parts(x)
    return lax.squeeze(re, (x.ndim - 1,)), lax.squeeze(im, (x.ndim - 1,))


def _conv(x, k, **params):
    """The complex convolution as four real ones on the parts."""
    a, b = _plane(x)
    c, d = _plane(k)

    def conv(u, v):
        out = lax.conv_general_dilated_p.bind(u, v, **params)
        return lax.expand_dims(out, (out.ndim,))

    return join(conv(a, c) - conv(b, d), conv(a, d) + conv(b, c))


def _conv_nd(dn=None, groups=1, **kw):
    return lambda x, k: lax.conv_general_dilated(
        x, k, (1, 1), "SAME", dimension_numbers=dn, feature_group_count=groups, **kw
    )


@family.lowering(
    lax.conv_general_dilated_p,
    values="complex",
    cases=lambda: [
        case("complex_conv", _conv_nd(), [("B", 2, 5, 5), (3, 2, 3, 3)], dtypes=_CC),
        case(
            "complex_conv_nhwc_groups",
            _conv_nd(("NHWC", "HWIO", "NHWC"), groups=2),
            [(1, 5, 4, 4), (3, 3, 2, 4)],
            dtypes=_CC,
        ),
        case("complex_convolve", jnp.convolve, [(7,), (3,)], dtypes=_CC),
        case(
            "complex_convolve_same",
            lambda a, b: jnp.convolve(a, b, mode="same"),
            [(6,), (3,)],
            dtypes=_CC,
        ),
        case(
            "complex_convolve_real", jnp.convolve, [(6,), (3,)], dtypes=[np.float32, np.complex64]
        ),
    ],
)
def conv_general_dilated(ctx, x, k, *, preferred_element_type=None, **params):
    """Four real convolutions of the parts (module docstring)."""
    pet = _part_dtype(preferred_element_type)
    return ctx.decompose(_conv, x, k, stored=True, preferred_element_type=pet, **params)


# Control flow and functions carry complex values in their stored form (registered
# values="any" elsewhere); these cases prove complex carries, outputs and arguments.


def _rotate(z, n):
    step = jnp.exp(1j * jnp.pi / 7).astype(z.dtype)
    return lax.fori_loop(0, n, lambda i, w: w * step + 0.1 * i, z)


def _scan_powers(z):
    def body(w, x):
        w = w * x
        return w, jnp.conj(w)

    return lax.scan(body, jnp.ones_like(z[0]), z)


def _while_grow(z):
    return lax.while_loop(lambda w: jnp.abs(w).sum() < 10.0, lambda w: w * (1 + 0.5j), z)


@onnx_function(type="ComplexRotate")
def _complex_rotate(z, w):
    return z * w + jnp.conj(z)


family.add_cases(
    lax.while_p,
    lambda: [
        case("complex_fori_rotate", lambda z: _rotate(z, 5), [("B", 3)], dtypes=_C),
        case(
            "complex_fori_traced",
            _rotate,
            [(3,), ()],
            dtypes=[np.complex64, np.int32],
            input_range=(0, 4),
        ),
        case("complex_while", _while_grow, [(4,)], dtypes=_C, input_range=(0.1, 1.0)),
    ],
)
family.add_cases(
    lax.scan_p,
    lambda: [
        case("complex_scan", _scan_powers, [(4, "B")], dtypes=_C),
        case(
            "complex_cumsum_scan", lambda z: lax.associative_scan(jnp.add, z), [(5, 2)], dtypes=_C
        ),
    ],
)
family.add_cases(
    lax.cond_p,
    lambda: [
        case(
            "complex_cond",
            lambda p, a, b: lax.cond(p > 0, lambda: a * b, lambda: a - jnp.conj(b)),
            [(), ("B", 3), ("B", 3)],
            dtypes=[np.float32, np.complex64, np.complex64],
        ),
        case(
            "complex_switch",
            lambda i, z: lax.switch(i, [lambda w: w, lambda w: w * 1j, jnp.conj], z),
            [(), (3,)],
            dtypes=[np.int32, np.complex64],
            input_range=(0, 3),
        ),
    ],
)
family.add_cases(
    "onnx_function",
    lambda: [
        case(
            "complex_function",
            lambda z, w: _complex_rotate(_complex_rotate(z, w), w),
            [("B", 3), ("B", 3)],
            dtypes=_CC,
            counts={"ComplexRotate": 2},
        ),
    ],
)


register = family.register
