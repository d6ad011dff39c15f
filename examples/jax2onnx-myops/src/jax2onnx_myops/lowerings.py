"""ONNX lowerings of the myops primitives, the interception, and their cases."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax2onnx.plugin import Family, case, kernel_dtypes

from jax2onnx_myops import ops
from jax2onnx_myops.ops import softclip_p, swish_gate_p

family = Family("myops")
register = family.register

if TYPE_CHECKING:  # onnx_ir loads with the converter, not with the plugin
    import onnx_ir as ir
    from jax2onnx.plugin import LoweringContext


def _swish_grad(x: jax.Array, gate: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.grad(lambda a, b: ops.swish_gate(a, b, beta=1.5).sum(), argnums=(0, 1))(x, gate)


@family.lowering(
    swish_gate_p,
    native_dtypes=kernel_dtypes("Sigmoid"),  # other dtypes: JAX's computation, inlined
    cases=lambda: [
        case(
            "swish_gate",
            ops.swish_gate,
            [("B", 4), ("B", 4)],
            expect=["Sigmoid -> Mul:Bx4"],
            counts={"Sigmoid": 1, "Mul": 1},
        ),
        case(
            "swish_gate_beta",
            lambda x, g: ops.swish_gate(x, g, beta=2.0),
            [(2, 3), (2, 3)],
            expect=["Mul -> Sigmoid -> Mul:2x3"],
        ),
        case(
            "swish_gate_vmap",
            jax.vmap(lambda x, g: ops.swish_gate(x, g, 0.5), in_axes=(0, 1)),
            [("B", 3), (3, "B")],
            expect=["Transpose -> Mul -> Sigmoid -> Mul:Bx3"],  # the gate transposed on entry
        ),
        case(
            "swish_gate_vmap_unbatched_gate",
            jax.vmap(lambda x, g: ops.swish_gate(x, g), in_axes=(0, None)),
            [("B", 2, 3), (2, 3)],
            expect=["Sigmoid -> Mul:Bx2x3"],
        ),
        case("swish_gate_grad", _swish_grad, [("B", 4), ("B", 4)], expect=["Sigmoid"]),
        case(
            "swish_gate_float16",
            lambda x, g: ops.swish_gate(x, g, beta=0.5),
            [(2, 3), (2, 3)],
            dtypes=[np.float16, np.float16],
            variants=["f32"],
            # float16 is not among kernel_dtypes("Sigmoid"): the core inlines the primitive's
            # impl, which jax2onnx-lax lowers op by op
            counts={"Mul": 2, "Sigmoid": 1},
        ),
    ],
)
def swish_gate(ctx: LoweringContext, x: ir.Value, gate: ir.Value, *, beta: float) -> ir.Value:
    """``x * sigmoid(beta * gate)`` -> ``Mul(gate, beta) -> Sigmoid -> Mul(x, .)``.

    The first ``Mul`` is left out when ``beta == 1``.
    """
    z = gate if beta == 1.0 else ctx.op.Mul(gate, beta)
    return ctx.op.Mul(x, ctx.op.Sigmoid(z))


@family.lowering(
    softclip_p,
    cases=lambda: [
        case(
            "softclip",
            lambda x: ops.fused_softclip(x, limit=2.0),
            [("B", 5)],
            expect=["Abs -> Div -> Add -> Div:Bx5"],
            counts={"Abs": 1, "Div": 2},
        ),
        case(
            "softclip_in_model",
            lambda x, w: jnp.tanh(ops.fused_softclip(x @ w, limit=0.5)),
            [("B", 3), (3, 4)],
            expect=["MatMul -> Abs -> Div -> Add -> Div -> Tanh:Bx4"],
        ),
        case(
            "softclip_vmap",
            jax.vmap(lambda x: ops.fused_softclip(x, limit=3.0)),
            [("B", 2, 3)],
            expect=["Abs -> Div -> Add -> Div:Bx2x3"],
        ),
        case(
            "softclip_grad",
            jax.grad(lambda x: ops.fused_softclip(x, limit=2.0).sum()),
            [("B",)],
            expect=["Max -> Div -> Add"],
        ),
        case(
            "softclip_unit",
            lambda x: ops.fused_softclip(x),
            [("B", 5)],
            variants=["f32"],
            expect=["Softsign:Bx5"],
        ),
        case(
            "softclip_f64_input",
            lambda x: ops.fused_softclip(x, limit=1.0),
            [np.array([-4.0, -0.5, 0.0, 0.25, 8.0])],
            variants=["f64"],
        ),
    ],
)
def softclip(ctx: LoweringContext, x: ir.Value, *, limit: float) -> ir.Value:
    """``x / (1 + |x| / limit)`` -> ``Abs -> Div(., limit) -> Add(., 1) -> Div(x, .)``.

    With ``limit == 1`` that is ONNX ``Softsign``: one node where ONNX Runtime
    has the kernel (float32 only; ``ctx.has_kernel`` reads the core's table).
    """
    if limit == 1.0 and ctx.has_kernel("Softsign", ctx.avals_in[0].dtype):
        return ctx.op.Softsign(x)
    scaled = ctx.op.Div(ctx.op.Abs(x), float(limit))
    return ctx.op.Div(x, ctx.op.Add(scaled, 1.0))


family.intercept("jax2onnx_myops.ops.fused_softclip", softclip_p)
