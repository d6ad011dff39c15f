"""Flax NNX ``Einsum`` and ``LoRA`` as macro primitives.

See :mod:`jax2onnx_flax.linear` for the approach (conversion-time promotion and
bias reshapes, one primitive on ``(x, kernel[, bias])``, explicit batching when
only ``x`` is batched, JAX's derivative of ``impl``, other dtypes than
float32/float64 inlining the ``impl``). ``Einsum`` is one ONNX ``Einsum`` (a
``MatMul`` when the equation is one); ``LoRA`` is two MatMuls through the
rank-``r`` bottleneck.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

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


# -- nnx.Einsum ------------------------------------------------------------------


def _einsum(x, kernel, *bias, equation, precision):
    y = jnp.einsum(equation, x, kernel, precision=precision)
    return y + bias[0] if bias else y


def _bind_einsum(x, *rest, equation, precision):
    inputs, out = equation.split("->")
    letter = next(c for c in LETTERS if c not in equation)
    batched = f"{letter}{inputs}->{letter}{out}"
    return einsum_p.bind(x, *rest, equation=batched, precision=precision), 0


einsum_p = family.primitive(
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


family.intercept("flax.nnx.Einsum.__call__", einsum_p, binder=_einsum_binder)


def _is_matmul(equation: str) -> bool:
    """``P c, c o -> P o`` (P may hold an ellipsis): one MatMul."""
    inputs, out = equation.split("->")
    lhs, rhs = inputs.split(",")
    if len(rhs) != 2 or "." in rhs or not lhs:
        return False
    c, o = rhs
    prefix = lhs[:-1]
    return lhs[-1] == c and c != o and c not in prefix and o not in prefix and out == prefix + o


family.add_cases(
    einsum_p,
    lambda: [
        case(
            "einsum_heads",
            module_factory(
                lambda nnx: nnx.Einsum("nta,hab->nthb", (8, 2, 4), (8, 4), rngs=nnx.Rngs(0))
            ),
            [("B", 5, 2)],
            factory=True,
            expect=["Einsum -> Add:Bx5x8x4"],
            counts={"Reshape": 0, "Transpose": 0},
            variants=["f32", "f64", "bf16", "f16"],  # half inputs promote to float32
        ),
        case(
            # computes in bfloat16 (dtype) with float32 parameters (param_dtype)
            "einsum_dtype_bfloat16",
            module_factory(
                lambda nnx: nnx.Einsum(
                    "nta,hab->nthb", (8, 2, 4), (8, 4), dtype=jnp.bfloat16, rngs=nnx.Rngs(0)
                )
            ),
            [("B", 5, 2)],
            factory=True,
            variants=["bf16"],
            expect=["Einsum -> Cast -> Cast -> Add:Bx5x8x4"],
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


@family.lowering(einsum_p, native_dtypes=FLOATS)
def einsum(ctx, x, kernel, *bias, equation, precision):
    """One Einsum (a MatMul when the equation is one), plus the broadcast bias Add."""
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


lora_p = family.primitive("lora", impl=_lora, batching=x_batched(_lora, _bind_lora), jvp="fallback")


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


family.intercept("flax.nnx.LoRA.__call__", lora_p, binder=_lora_binder)


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


family.add_cases(
    lora_p,
    lambda: [
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


@family.lowering(lora_p, native_dtypes=FLOATS)
def lora(ctx, x, a, b):
    """``x @ A @ B`` as two MatMuls (rank-r bottleneck kept, never A @ B materialised)."""
    return ctx.op.MatMul(ctx.op.MatMul(x, a), b)
