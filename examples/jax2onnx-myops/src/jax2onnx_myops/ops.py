"""The public operations of jax2onnx-myops, usable in plain JAX.

* :func:`swish_gate` is computed by its own JAX primitive ``myops.swish_gate``
  with an explicit batching rule and an explicit JVP rule, so it works under
  ``jax.jit``, ``jax.vmap`` and ``jax.grad`` and stays one primitive in every
  jaxpr.
* :func:`fused_softclip` is plain ``jax.numpy``. While ``jax2onnx.to_onnx``
  traces, the plugin replaces the module attribute
  ``jax2onnx_myops.ops.fused_softclip`` with a call binding the macro primitive
  ``myops.softclip``. Call it as ``ops.fused_softclip(...)`` (through the
  module); a name bound earlier with ``from jax2onnx_myops.ops import
  fused_softclip`` keeps the original function and is traced op by op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.interpreters import ad
from jax2onnx.plugin import Family, batch_at_front

family = Family("myops")
register = family.register

__all__ = ["fused_softclip", "softclip_p", "swish_gate", "swish_gate_p"]


def _swish_gate_impl(x: jax.Array, gate: jax.Array, *, beta: float) -> jax.Array:
    return x * jax.nn.sigmoid(beta * gate)


def _swish_gate_batching(
    args: Sequence[jax.Array], dims: Sequence[int | None], *, beta: float
) -> tuple[jax.Array, int]:
    """Move both batch axes to the front (broadcasting an unbatched operand), bind again."""
    return swish_gate_p.bind(*batch_at_front(args, dims), beta=beta), 0


def _swish_gate_jvp(
    primals: Sequence[jax.Array], tangents: Sequence[Any], *, beta: float
) -> tuple[jax.Array, jax.Array]:
    """d(x * s) = dx * s + dgate * beta * x * s * (1 - s), with s = sigmoid(beta * gate).

    The primal stays one ``swish_gate`` primitive; the tangent is linear in
    ``dx`` and ``dgate`` (plain multiplications), so ``jax.grad`` can transpose it.
    """
    x, gate = primals
    dx, dgate = tangents
    out = swish_gate_p.bind(x, gate, beta=beta)
    s = jax.nn.sigmoid(beta * gate)
    terms = []
    if not isinstance(dx, ad.Zero):
        terms.append(dx * s)
    if not isinstance(dgate, ad.Zero):
        terms.append(dgate * (beta * x * s * (1.0 - s)))
    if not terms:
        return out, jnp.zeros_like(out)
    return out, terms[0] if len(terms) == 1 else terms[0] + terms[1]


swish_gate_p = family.primitive(
    "swish_gate", impl=_swish_gate_impl, batching=_swish_gate_batching, jvp=_swish_gate_jvp
)


def swish_gate(x: jax.Array, gate: jax.Array, beta: float = 1.0) -> jax.Array:
    """``x * sigmoid(beta * gate)``, elementwise; ``x`` and ``gate`` have one shape and dtype.

    ``beta`` is a static Python number (a parameter of the primitive, not an operand).
    """
    x, gate = jnp.asarray(x), jnp.asarray(gate)
    if x.shape != gate.shape or x.dtype != gate.dtype:
        raise ValueError(
            f"swish_gate needs x and gate of one shape and dtype, got "
            f"{x.dtype}{list(x.shape)} and {gate.dtype}{list(gate.shape)}"
        )
    return swish_gate_p.bind(x, gate, beta=float(beta))


def fused_softclip(x: jax.Array, *, limit: float = 1.0) -> jax.Array:
    """Soft clipping into ``(-limit, limit)``: ``x / (1 + |x| / limit)``, in plain jax.numpy.

    ``limit`` is keyword-only and static: the interception binds it as a
    parameter of ``myops.softclip``. (An array ``limit`` also works; that call
    is not intercepted and traces op by op.)
    """
    return x / (1.0 + jnp.abs(x) / limit)


def _softclip_jvp(
    primals: Sequence[jax.Array], tangents: Sequence[Any], *, limit: float
) -> tuple[jax.Array, jax.Array]:
    """d softclip = dx / (1 + |x| / limit)**2; |x| is written as max(x, -x)."""
    (x,), (dx,) = primals, tangents
    r = 1.0 / (1.0 + jnp.maximum(x, -x) / limit)
    return softclip_p.bind(x, limit=limit), dx * (r * r)


# ``impl`` is the function object itself, so evaluating the primitive never
# goes through the (possibly patched) module attribute.
softclip_p = family.primitive(
    "softclip", impl=fused_softclip, batching="elementwise", jvp=_softclip_jvp
)
