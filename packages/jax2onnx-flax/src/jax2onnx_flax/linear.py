"""Flax NNX linear layers as macro primitives: ``Linear``, ``LinearGeneral``, ``Einsum``
and ``LoRA`` (``LoRALinear`` is the Linear and LoRA primitives plus an Add).

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
decomposition.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import case
from jax2onnx_flax._rules import rules

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
_FLOATS = (F32, F64)  # ONNX Runtime's Gemm, MatMul and Einsum have kernels for both
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


# -- helpers shared with embed, conv, conv_transpose ----------------------------------------------


def at_conversion(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args)`` with concrete arrays computed now (they become initializers).

    Operations on the module's arrays (dtype promotion, masks, reshapes) run
    eagerly with JAX's own numbers; operations on traced inputs are staged.
    """
    with jax.ensure_compile_time_eval():
        return fn(*args, **kwargs)


def promoted(module: Any, arrays: tuple[Any, ...], **kwargs: Any) -> tuple[Any, ...]:
    """``module.promote_dtype(arrays, dtype=module.dtype)``, parameters promoted now."""
    return at_conversion(module.promote_dtype, arrays, dtype=module.dtype, **kwargs)


def x_batched(impl: Callable[..., Any], bind: Callable[..., Any]) -> Callable[..., Any]:
    """A batching rule: with only operand 0 batched, ``bind`` it moved to the front.

    ``bind(x, *rest, **params)`` returns ``(out, out_batch_dim)``. Batched
    parameters (vmap over weights) use JAX's vmap of ``impl``.
    """

    def rule(args, dims, **params):
        if dims[0] is None or any(d is not None for d in dims[1:]):
            out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims))(*args)
            return out, 0
        x = jnp.moveaxis(args[0], dims[0], 0)
        return bind(x, *args[1:], **params)

    return rule


def native(ctx) -> bool:
    return all(np.dtype(a.dtype) in _FLOATS for a in ctx.avals_in)


def hashable_precision(precision: Any) -> Any:
    """A primitive parameter must be hashable: a list of precisions becomes a tuple."""
    return tuple(precision) if isinstance(precision, list) else precision


# -- nnx.Linear ----------------------------------------------------------------


def _linear(x, kernel, *bias, precision):
    y = lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)
    if bias:
        y = y + jnp.reshape(bias[0], (1,) * (y.ndim - 1) + (-1,))
    return y


def _bind_linear(x, *rest, **params):
    return linear_p.bind(x, *rest, **params), 0


linear_p = rules.primitive(
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


rules.intercept("flax.nnx.Linear.__call__", linear_p, binder=_linear_binder)


def module_factory(factory: Callable[[Any], Any], wrap: Callable[[Any], Any] | None = None):
    """A case factory: builds the module with ``nnx.Rngs(0)``, optionally wrapped."""

    def make():
        from flax import nnx

        module = factory(nnx)
        return wrap(module) if wrap is not None else module

    return make


def grad_of_squares(module):
    """``jax.grad`` of ``sum(module(x) ** 2)`` (squared, so the gradient depends on ``x``)."""
    return jax.grad(lambda x: (module(x) ** 2).sum())


_LINEAR = module_factory(lambda nnx: nnx.Linear(4, 5, rngs=nnx.Rngs(0)))
_LINEAR_NO_BIAS = module_factory(lambda nnx: nnx.Linear(4, 5, use_bias=False, rngs=nnx.Rngs(0)))

rules.add_cases(
    linear_p,
    [
        case(
            "linear_2d",
            _LINEAR,
            [("B", 4)],
            factory=True,
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


@rules.lowering(linear_p)
def linear(ctx, x, kernel, *bias, precision):
    """Gemm for a 2-D input, MatMul (+ Add, broadcasting the bias) otherwise."""
    if not native(ctx):
        return ctx.decompose(_linear, x, kernel, *bias, precision=precision)
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


linear_general_p = rules.primitive(
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


rules.intercept("flax.nnx.LinearGeneral.__call__", linear_general_p, binder=_linear_general_binder)


def _dot_equation(ranks, dimension_numbers) -> str | None:
    """The Einsum equation of a dot_general, or None when it is a plain MatMul."""
    x_rank, k_rank = ranks
    (axis, contract), (batch, kbatch) = dimension_numbers
    xs = list(_LETTERS[:x_rank])
    ks = [""] * k_rank
    for a, c in zip(axis + batch, contract + kbatch):
        ks[c] = xs[a]
    fresh = iter(_LETTERS[x_rank:])
    ks = [k or next(fresh) for k in ks]
    out = [xs[a] for a in batch]
    out += [xs[i] for i in range(x_rank) if i not in axis and i not in batch]
    out += [ks[i] for i in range(k_rank) if i not in contract and i not in kbatch]
    if not batch and axis == (x_rank - 1,) and contract == (0,) and k_rank == 2:
        return None
    return f"{''.join(xs)},{''.join(ks)}->{''.join(out)}"


rules.add_cases(
    linear_general_p,
    [
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
            expect=["Einsum -> Add:Bx4x5"],
            counts={"Reshape": 0, "Transpose": 0},
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


@rules.lowering(linear_general_p)
def linear_general(ctx, x, kernel, *bias, dimension_numbers, precision):
    """MatMul when it is one (the last axis), else one Einsum; the bias is one Add."""
    if not native(ctx):
        return ctx.decompose(
            _linear_general,
            x,
            kernel,
            *bias,
            dimension_numbers=dimension_numbers,
            precision=precision,
        )
    ranks = (ctx.avals_in[0].ndim, ctx.avals_in[1].ndim)
    equation = _dot_equation(ranks, dimension_numbers)
    y = (
        ctx.op.MatMul(x, kernel)
        if equation is None
        else ctx.op.Einsum(x, kernel, equation=equation)
    )
    return ctx.op.Add(y, bias[0]) if bias else y


# -- nnx.Einsum ------------------------------------------------------------------


def _einsum(x, kernel, *bias, equation, precision):
    y = jnp.einsum(equation, x, kernel, precision=precision)
    return y + bias[0] if bias else y


def _bind_einsum(x, *rest, equation, precision):
    inputs, out = equation.split("->")
    letter = next(c for c in _LETTERS if c not in equation)
    batched = f"{letter}{inputs}->{letter}{out}"
    return einsum_p.bind(x, *rest, equation=batched, precision=precision), 0


einsum_p = rules.primitive(
    "einsum", impl=_einsum, batching=x_batched(_einsum, _bind_einsum), jvp="fallback"
)


def _einsum_binder(original):
    @functools.wraps(original)
    def call(self, inputs, einsum_str=None, out_sharding=None):
        equation = einsum_str if einsum_str is not None else self.einsum_str
        if (
            out_sharding is not None
            or self.preferred_element_type is not None
            or self.einsum_op is not jnp.einsum
            or equation is None
        ):
            return original(self, inputs, einsum_str=einsum_str, out_sharding=out_sharding)
        equation = equation.replace(" ", "")
        self._einsum_str_check(equation)
        bias = self.bias[...] if self.bias is not None else None
        x, kernel, bias = promoted(self, (inputs, self.kernel[...], bias))
        operands = [x, kernel]
        if bias is not None:
            shape = self._infer_broadcasted_bias_shape(equation, x, kernel)
            operands.append(at_conversion(jnp.reshape, bias, shape))
        return einsum_p.bind(
            *operands, equation=equation, precision=hashable_precision(self.precision)
        )

    return call


rules.intercept("flax.nnx.Einsum.__call__", einsum_p, binder=_einsum_binder)


def _is_matmul(equation: str) -> bool:
    """``P c, c o -> P o`` (P may hold an ellipsis): one MatMul."""
    inputs, out = equation.split("->")
    lhs, rhs = inputs.split(",")
    if len(rhs) != 2 or "." in rhs or not lhs:
        return False
    c, o = rhs
    prefix = lhs[:-1]
    return lhs[-1] == c and c != o and c not in prefix and o not in prefix and out == prefix + o


rules.add_cases(
    einsum_p,
    [
        case(
            "einsum_heads",
            module_factory(
                lambda nnx: nnx.Einsum("nta,hab->nthb", (8, 2, 4), (8, 4), rngs=nnx.Rngs(0))
            ),
            [("B", 5, 2)],
            factory=True,
            expect=["Einsum -> Add:Bx5x8x4"],
            counts={"Reshape": 0, "Transpose": 0},
        ),
        case(
            "einsum_matmul",
            module_factory(lambda nnx: nnx.Einsum("...a,ab->...b", (3, 4), (4,), rngs=nnx.Rngs(0))),
            [("B", 2, 3)],
            factory=True,
            expect=["MatMul -> Add:Bx2x4"],
            counts={"Einsum": 0},
        ),
        case(
            "einsum_no_bias",
            module_factory(lambda nnx: nnx.Einsum("bta,ac->bct", (3, 4), rngs=nnx.Rngs(0))),
            [("B", 5, 3)],
            factory=True,
            expect=["Einsum:Bx4x5"],
        ),
        case(
            "einsum_vmap",
            module_factory(
                lambda nnx: nnx.Einsum("ta,hab->thb", (2, 3, 4), (2, 4), rngs=nnx.Rngs(0)), jax.vmap
            ),
            [("B", 5, 3)],
            factory=True,
            expect=["Einsum -> Add:Bx5x2x4"],
        ),
        case(
            "einsum_grad",
            module_factory(
                lambda nnx: nnx.Einsum("nta,hab->nthb", (2, 3, 4), (2, 4), rngs=nnx.Rngs(0)),
                grad_of_squares,
            ),
            [(2, 5, 3)],
            factory=True,
        ),
    ],
)


@rules.lowering(einsum_p)
def einsum(ctx, x, kernel, *bias, equation, precision):
    """One Einsum (a MatMul when the equation is one), plus the broadcast bias Add."""
    if not native(ctx):
        return ctx.decompose(_einsum, x, kernel, *bias, equation=equation, precision=precision)
    if _is_matmul(equation):
        y = ctx.op.MatMul(x, kernel)
    else:
        y = ctx.op.Einsum(x, kernel, equation=equation)
    return ctx.op.Add(y, bias[0]) if bias else y


# -- nnx.LoRA --------------------------------------------------------------------


def _lora(x, a, b):
    return x @ a @ b


def _bind_lora(x, a, b):
    return lora_p.bind(x, a, b), 0


lora_p = rules.primitive("lora", impl=_lora, batching=x_batched(_lora, _bind_lora), jvp="fallback")


def _lora_binder(original):
    @functools.wraps(original)
    def call(self, x, **kwargs):
        x, a, b = promoted(self, (x, self.lora_a[...], self.lora_b[...]))
        out = lora_p.bind(x, a, b)
        if self.base_module is not None:
            if not callable(self.base_module):
                raise ValueError("`self.base_module` must be callable.")
            out += self.base_module(x, **kwargs)
        return out

    return call


rules.intercept("flax.nnx.LoRA.__call__", lora_p, binder=_lora_binder)


def _with_lora_b(module):
    """LoRA's B starts at zero: give it values so the low-rank path shows in the numbers."""
    from flax import nnx

    lora = module.lora if isinstance(module, nnx.LoRALinear) else module
    shape = lora.lora_b[...].shape
    lora.lora_b[...] = jnp.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape)
    return module


def _lora_model(nnx):
    return _with_lora_b(nnx.LoRA(4, 2, 5, rngs=nnx.Rngs(0)))


def _lora_linear_model(nnx):
    return _with_lora_b(nnx.LoRALinear(4, 5, lora_rank=2, rngs=nnx.Rngs(0)))


rules.add_cases(
    lora_p,
    [
        case(
            "lora",
            module_factory(_lora_model),
            [("B", 4)],
            factory=True,
            expect=["MatMul -> MatMul:Bx5"],
            counts={"Transpose": 0},
        ),
        case(
            "lora_base_module",
            module_factory(
                lambda nnx: _with_lora_b(
                    nnx.LoRA(
                        4, 2, 5, base_module=nnx.Linear(4, 5, rngs=nnx.Rngs(1)), rngs=nnx.Rngs(0)
                    )
                )
            ),
            [("B", 3, 4)],
            factory=True,
            expect=["MatMul -> MatMul -> Add:Bx3x5"],
        ),
        case(
            "lora_linear",
            module_factory(_lora_linear_model),
            [("B", 4)],
            factory=True,
            expect=["Gemm -> Add:Bx5", "MatMul -> MatMul -> Add:Bx5"],
        ),
        case(
            "lora_vmap",
            module_factory(_lora_model, jax.vmap),
            [("B", 3, 4)],
            factory=True,
            expect=["MatMul -> MatMul:Bx3x5"],
        ),
        case(
            "lora_grad", module_factory(_lora_linear_model, grad_of_squares), [(3, 4)], factory=True
        ),
    ],
)


@rules.lowering(lora_p)
def lora(ctx, x, a, b):
    """``x @ A @ B`` as two MatMuls (rank-r bottleneck kept, never A @ B materialised)."""
    if not native(ctx):
        return ctx.decompose(_lora, x, a, b)
    return ctx.op.MatMul(ctx.op.MatMul(x, a), b)
