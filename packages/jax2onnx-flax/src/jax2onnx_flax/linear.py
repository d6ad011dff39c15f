"""Flax NNX ``Linear`` and ``LinearGeneral`` as macro primitives (``Einsum`` and ``LoRA``:
:mod:`jax2onnx_flax.einsum`; ``LoRALinear`` is the Linear and LoRA primitives plus an Add).

Each module's ``__call__`` is intercepted while ``to_onnx`` traces. The stand-in
does, at conversion time, everything that touches only the module's arrays:
flax's own ``promote_dtype`` (so a float32 kernel used with float64 inputs becomes
a float64 initializer, not a runtime Cast) and bias reshapes. It then binds one
primitive on ``(x, kernel[, bias])`` whose ``impl`` is the arithmetic flax does.
Calls with an option the primitive does not cover (a custom ``dot_general`` or
``einsum_op``, ``preferred_element_type``, ``out_sharding``) run the original
method, which converts through the lax lowerings.

Batching is explicit when only ``x`` is batched: the vmapped axis moves to the
front of ``x`` and the same primitive binds again (an extra leading dimension,
which MatMul and Einsum take as is). JVPs are JAX's derivative of
``impl`` (``"fallback"``). Dtypes other than float32/float64 inline JAX's
decomposition (``native_dtypes``: the primitive's ``impl`` is the fallback).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jax2onnx.plugin import Family, at_conversion, case
from jax2onnx_flax._util import (
    FLOATS,
    LETTERS,
    grad_of_squares,
    hashable_precision,
    module_factory,
    promoted,
    x_batched,
)

family = Family("flax")
register = family.register


# -- nnx.Linear ----------------------------------------------------------------


def _linear(x, kernel, *bias, precision):
    y = lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)
    if bias:
        y = y + jnp.reshape(bias[0], (1,) * (y.ndim - 1) + (-1,))
    return y


def _bind_linear(x, *rest, **params):
    return linear_p.bind(x, *rest, **params), 0


linear_p = family.primitive(
    "linear", impl=_linear, batching=x_batched(_linear, _bind_linear), jvp="fallback"
)


def _linear_binder(original):
    @functools.wraps(original)
    def call(self, inputs, out_sharding=None):
        if (
            out_sharding is not None
            or self.preferred_element_type is not None
            or self.dot_general is not lax.dot_general
        ):
            return original(self, inputs, out_sharding=out_sharding)
        bias = self.bias[...] if self.bias is not None else None
        x, kernel, bias = promoted(self, (inputs, self.kernel[...], bias))
        operands = (x, kernel) if bias is None else (x, kernel, bias)
        return linear_p.bind(*operands, precision=hashable_precision(self.precision))

    return call


family.intercept("flax.nnx.Linear.__call__", linear_p, binder=_linear_binder)


_LINEAR = module_factory(lambda nnx: nnx.Linear(4, 5, rngs=nnx.Rngs(0)))
_LINEAR_NO_BIAS = module_factory(lambda nnx: nnx.Linear(4, 5, use_bias=False, rngs=nnx.Rngs(0)))

family.add_cases(
    linear_p,
    lambda: [
        case(
            "linear_2d",
            _LINEAR,
            [("B", 4)],
            factory=True,
            variants=["f32", "f64", "bf16", "f16"],  # half inputs promote to the float32 kernel
            expect=["Gemm:Bx5"],
            counts={"MatMul": 0},
        ),
        case(
            "linear_3d",
            _LINEAR,
            [("B", 3, 4)],
            factory=True,
            expect=["MatMul -> Add:Bx3x5"],
            counts={"Reshape": 0, "Gemm": 0},
        ),
        case(
            "linear_no_bias_2d",
            _LINEAR_NO_BIAS,
            [("B", 4)],
            factory=True,
            expect=["Gemm:Bx5"],
            counts={"Add": 0},
        ),
        case(
            "linear_no_bias_3d",
            _LINEAR_NO_BIAS,
            [("B", 2, 3, 4)],
            factory=True,
            expect=["MatMul:Bx2x3x5"],
            counts={"Add": 0, "Reshape": 0},
        ),
        case(
            # bfloat16 weights stay bfloat16 in the file; the graph casts them for the Gemm
            "linear_bfloat16_params",
            module_factory(
                lambda nnx: nnx.Linear(4, 5, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
            ),
            [("B", 4)],
            factory=True,
            variants=["f32"],
            expect=["Cast -> Gemm:Bx5"],
            counts={"Cast": 2},
        ),
        case(
            # computes in bfloat16 (dtype) with float32 parameters (param_dtype)
            "linear_dtype_bfloat16",
            module_factory(lambda nnx: nnx.Linear(4, 5, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))),
            [("B", 3, 4)],
            factory=True,
            variants=["f32", "bf16"],
            # ORT has no bfloat16 MatMul/Add: each runs in float32, its result rounded to
            # bfloat16 between them as JAX rounds it
            expect=["MatMul -> Cast -> Cast -> Add:Bx3x5"],
        ),
        case(
            "linear_dtype_float32",
            module_factory(lambda nnx: nnx.Linear(4, 3, dtype=jnp.float32, rngs=nnx.Rngs(0))),
            [("B", 4)],
            factory=True,
            expect=["Gemm:Bx3"],
        ),
        case(
            "linear_precision_highest",
            module_factory(lambda nnx: nnx.Linear(4, 3, precision="highest", rngs=nnx.Rngs(0))),
            [("B", 4)],
            factory=True,
            expect=["Gemm"],
        ),
        case(
            "linear_vmap",
            module_factory(lambda nnx: nnx.Linear(4, 5, rngs=nnx.Rngs(0)), jax.vmap),
            [("B", 3, 4)],
            factory=True,
            expect=["MatMul -> Add:Bx3x5"],
            counts={"Transpose": 0, "Reshape": 0},
        ),
        case(
            "linear_grad",
            module_factory(lambda nnx: nnx.Linear(4, 5, rngs=nnx.Rngs(0)), grad_of_squares),
            [(3, 4)],
            factory=True,
        ),
    ],
)


@family.lowering(linear_p, native_dtypes=FLOATS)
def linear(ctx, x, kernel, *bias, precision):
    """Gemm for a 2-D input, MatMul (+ Add, broadcasting the bias) otherwise."""
    if ctx.avals_in[0].ndim == 2:
        return ctx.op.Gemm(x, kernel, *bias)
    y = ctx.op.MatMul(x, kernel)
    return ctx.op.Add(y, bias[0]) if bias else y


# -- nnx.LinearGeneral -----------------------------------------------------------


def _linear_general(x, kernel, *bias, dimension_numbers, precision):
    y = lax.dot_general(x, kernel, dimension_numbers, precision=precision)
    return y + bias[0] if bias else y


def _bind_linear_general(x, *rest, dimension_numbers, precision):
    (axis, contract), (batch, kbatch) = dimension_numbers
    if batch:  # flax's batch axes must lead; the vmapped axis cannot go in front of them
        out = jax.vmap(
            functools.partial(
                _linear_general, dimension_numbers=dimension_numbers, precision=precision
            ),
            in_axes=(0, *([None] * len(rest))),
        )(x, *rest)
        return out, 0
    shifted = ((tuple(a + 1 for a in axis), contract), ((), ()))
    return linear_general_p.bind(x, *rest, dimension_numbers=shifted, precision=precision), 0


linear_general_p = family.primitive(
    "linear_general",
    impl=_linear_general,
    batching=x_batched(_linear_general, _bind_linear_general),
    jvp="fallback",
)


def _linear_general_binder(original):
    from flax.nnx.nn.linear import _normalize_axes

    @functools.wraps(original)
    def call(self, inputs, out_sharding=None):
        if (
            out_sharding is not None
            or self.preferred_element_type is not None
            or self.dot_general is not None
            or self.dot_general_cls is not None
        ):
            return original(self, inputs, out_sharding=out_sharding)
        ndim = jnp.ndim(inputs)
        axis = _normalize_axes(self.axis, ndim)
        batch_axis = _normalize_axes(tuple(self.batch_axis.keys()), ndim)
        n_batch = len(batch_axis)
        expanded = tuple(
            self.batch_axis[ax] if ax in batch_axis else 1 for ax in range(ndim) if ax not in axis
        )
        bias = self.bias[...] if self.bias is not None else None
        x, kernel, bias = promoted(self, (inputs, self.kernel[...], bias))
        dn = (
            (axis, tuple(range(n_batch, n_batch + len(axis)))),
            (batch_axis, tuple(range(n_batch))),
        )
        operands = [x, kernel]
        if bias is not None:
            operands.append(at_conversion(jnp.reshape, bias, (*expanded, *self.out_features)))
        return linear_general_p.bind(
            *operands, dimension_numbers=dn, precision=hashable_precision(self.precision)
        )

    return call


family.intercept("flax.nnx.LinearGeneral.__call__", linear_general_p, binder=_linear_general_binder)


def _dot_equation(ranks, dimension_numbers) -> str | None:
    """The Einsum equation of a dot_general, or None when it is a plain MatMul."""
    x_rank, k_rank = ranks
    (axis, contract), (batch, kbatch) = dimension_numbers
    xs = list(LETTERS[:x_rank])
    ks = [""] * k_rank
    for a, c in zip(axis + batch, contract + kbatch):
        ks[c] = xs[a]
    fresh = iter(LETTERS[x_rank:])
    ks = [k or next(fresh) for k in ks]
    out = [xs[a] for a in batch]
    out += [xs[i] for i in range(x_rank) if i not in axis and i not in batch]
    out += [ks[i] for i in range(k_rank) if i not in contract and i not in kbatch]
    if not batch and axis == (x_rank - 1,) and contract == (0,) and k_rank == 2:
        return None
    return f"{''.join(xs)},{''.join(ks)}->{''.join(out)}"


family.add_cases(
    linear_general_p,
    lambda: [
        case(
            "linear_general_last_axis",
            module_factory(lambda nnx: nnx.LinearGeneral(4, 5, rngs=nnx.Rngs(0))),
            [("B", 3, 4)],
            factory=True,
            expect=["MatMul -> Add:Bx3x5"],
            counts={"Einsum": 0, "Reshape": 0},
        ),
        case(
            "linear_general_two_axes",
            module_factory(
                lambda nnx: nnx.LinearGeneral((2, 3), (4, 5), axis=(1, -1), rngs=nnx.Rngs(0))
            ),
            [("B", 2, 3)],
            factory=True,
            variants=["f32", "f64", "bf16"],
            expect=["Einsum -> Add:Bx4x5"],
            counts={"Reshape": 0, "Transpose": 0},
        ),
        case(
            "linear_general_dtype_bfloat16",
            module_factory(
                lambda nnx: nnx.LinearGeneral(
                    (2, 3), 4, axis=(1, 2), dtype=jnp.bfloat16, rngs=nnx.Rngs(0)
                )
            ),
            [("B", 2, 3)],
            factory=True,
            variants=["bf16"],
            expect=["Einsum -> Cast -> Cast -> Add:Bx4"],
        ),
        case(
            "linear_general_middle_axis",
            module_factory(
                lambda nnx: nnx.LinearGeneral(3, (2, 2), axis=1, use_bias=False, rngs=nnx.Rngs(0))
            ),
            [("B", 3, 4)],
            factory=True,
            expect=["Einsum:Bx4x2x2"],
            counts={"Add": 0},
        ),
        case(
            "linear_general_batch_axis",
            module_factory(
                lambda nnx: nnx.LinearGeneral(3, 4, axis=-1, batch_axis={0: 2}, rngs=nnx.Rngs(0))
            ),
            [(2, "B", 3)],
            factory=True,
            expect=["Einsum -> Add:2xBx4"],
        ),
        case(
            "linear_general_vmap",
            module_factory(
                lambda nnx: nnx.LinearGeneral((2, 3), 4, axis=(0, 1), rngs=nnx.Rngs(0)), jax.vmap
            ),
            [("B", 2, 3)],
            factory=True,
            expect=["Einsum -> Add:Bx4"],
        ),
        case(
            "linear_general_vmap_batch_axis",
            module_factory(
                lambda nnx: nnx.LinearGeneral(3, 4, batch_axis={0: 2}, rngs=nnx.Rngs(0)),
                jax.vmap,
            ),
            [("B", 2, 5, 3)],
            factory=True,
        ),
        case(
            "linear_general_grad",
            module_factory(
                lambda nnx: nnx.LinearGeneral((2, 3), (4, 5), axis=(1, 2), rngs=nnx.Rngs(0)),
                grad_of_squares,
            ),
            [(3, 2, 3)],
            factory=True,
        ),
    ],
)


@family.lowering(linear_general_p, native_dtypes=FLOATS)
def linear_general(ctx, x, kernel, *bias, dimension_numbers, precision):
    """MatMul when it is one (the last axis), else one Einsum; the bias is one Add."""
    ranks = (ctx.avals_in[0].ndim, ctx.avals_in[1].ndim)
    equation = _dot_equation(ranks, dimension_numbers)
    y = (
        ctx.op.MatMul(x, kernel)
        if equation is None
        else ctx.op.Einsum(x, kernel, equation=equation)
    )
    return ctx.op.Add(y, bias[0]) if bias else y
