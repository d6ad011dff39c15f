"""Flax Linen ``Dense`` as the NNX ``linear`` primitive (one Gemm, or MatMul + Add).

The stand-in runs inside Linen's method wrapper (see :mod:`jax2onnx_flax.linen`):
it reads ``kernel`` and ``bias`` with ``module.param`` as ``Dense`` does (so
``init`` inside a traced function still creates them), promotes dtypes at
conversion time and binds :data:`jax2onnx_flax.linear.linear_p`, whose
lowering, batching and JVP rules the NNX ``Linear`` already has. A custom
``dot_general``/``dot_general_cls`` runs Flax's own method.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax2onnx.plugin import Family, case
from jax2onnx_flax._util import (
    grad_of_squares,
    hashable_precision,
    linen_factory,
    linen_promoted,
    via_apply,
)
from jax2onnx_flax.linear import linear_p
from jax2onnx_flax.linen import LinenStandIn

family = Family("flax")
register = family.register


def dense(original, module, inputs):
    """``nn.Dense.__call__``: the ``linear`` primitive on ``(x, kernel[, bias])``."""
    if module.dot_general is not None or module.dot_general_cls is not None:
        return original(inputs)
    kernel = module.param(
        "kernel", module.kernel_init, (jnp.shape(inputs)[-1], module.features), module.param_dtype
    )
    bias = (
        module.param("bias", module.bias_init, (module.features,), module.param_dtype)
        if module.use_bias
        else None
    )
    x, kernel, bias = linen_promoted(module, (inputs, kernel, bias))
    operands = (x, kernel) if bias is None else (x, kernel, bias)
    return linear_p.bind(*operands, precision=hashable_precision(module.precision))


LINEN = (LinenStandIn("Dense", "__call__", dense),)


def _dense(features=5, **kwargs):
    return lambda nn: nn.Dense(features, **kwargs)


class _Subclassed:
    """A ``Dense`` subclass whose ``__call__`` calls ``super().__call__`` (still one Gemm)."""

    @staticmethod
    def build(nn):
        class Scaled(nn.Dense):
            @nn.compact
            def __call__(self, x):
                return 2.0 * super().__call__(x)

        return Scaled(5)


family.add_cases(
    linear_p,
    lambda: [
        case(
            "linen_dense_2d",
            linen_factory(_dense(), (2, 4)),
            [("B", 4)],
            factory=True,
            expect=["Gemm:Bx5"],
            counts={"MatMul": 0},
            variants=["f32", "f64", "bf16", "f16"],  # half inputs promote to float32
        ),
        case(
            # computes in bfloat16 (dtype) with float32 parameters (param_dtype)
            "linen_dense_dtype_bfloat16",
            linen_factory(_dense(dtype=jnp.bfloat16), (2, 3, 4)),
            [("B", 3, 4)],
            factory=True,
            variants=["bf16"],
            expect=["MatMul -> Cast -> Cast -> Add:Bx3x5"],
        ),
        case(
            "linen_dense_3d",
            linen_factory(_dense(), (2, 3, 4)),
            [("B", 3, 4)],
            factory=True,
            expect=["MatMul -> Add:Bx3x5"],
            counts={"Reshape": 0, "Gemm": 0},
        ),
        case(
            "linen_dense_static",
            linen_factory(_dense(use_bias=False), (2, 4)),
            [(3, 4)],
            factory=True,
            expect=["Gemm:3x5"],
            counts={"Add": 0},
        ),
        case(
            "linen_dense_bfloat16_params",
            linen_factory(_dense(param_dtype=jnp.bfloat16), (2, 4)),
            [("B", 4)],
            factory=True,
            variants=["f32"],
            expect=["Cast -> Gemm:Bx5"],
        ),
        case(
            "linen_dense_subclass_super",
            linen_factory(_Subclassed.build, (2, 4)),
            [("B", 4)],
            factory=True,
            expect=["Gemm -> Mul:Bx5"],
        ),
        case(
            "linen_dense_custom_dot_general",
            # Flax's own method, through the lax lowerings
            linen_factory(_dense(dot_general=jax.lax.dot_general), (2, 4)),
            [("B", 4)],
            factory=True,
        ),
        case(
            "linen_dense_apply_lambda",
            linen_factory(_dense(), (2, 4), wrap=via_apply),
            [("B", 4)],
            factory=True,
            expect=["Gemm:Bx5"],
        ),
        case(
            "linen_dense_vmap",
            linen_factory(_dense(), (2, 4), wrap=jax.vmap),
            [("B", 3, 4)],
            factory=True,
            expect=["MatMul -> Add:Bx3x5"],
            counts={"Transpose": 0, "Reshape": 0},
        ),
        case(
            "linen_dense_grad",
            linen_factory(_dense(), (2, 4), wrap=grad_of_squares),
            [(3, 4)],
            factory=True,
        ),
    ],
)
