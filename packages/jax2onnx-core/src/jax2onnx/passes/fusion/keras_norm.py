"""``LayerNormalization`` (opset >= 17) from Keras 3's layer norm arithmetic.

Keras 3 (``LayerNormalization.call``, ``ops.layer_normalization`` with the
JAX backend) normalises without subtracting the mean from ``x`` first::

    mean, var = moments(x, axes, keepdims=True)   # jnp.mean, jnp.var
    inv = rsqrt(var + eps) [* gamma]
    res = -mean * inv [+ beta]
    y = x * inv + res

Matched (after the canonical forms, ``mean`` over trailing axes, ``var`` in any
form :func:`.layer_norm.variance_of` reads): the final ``Add`` with
``x * inv`` and ``neg(mean) * inv [+ beta]`` in either order. Since
``x * inv - mean * inv + beta = (x - mean) * inv + beta``, this is
``LayerNormalization(x, gamma, beta)``: the same function, computed with
the subtraction first (which rounds less when ``|mean|`` is large against
the spread). ``gamma`` and ``beta`` must be constants varying only along the
normalised axes. With ``normalization_mode="force_decomposed"`` nothing is
fused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.layer_norm import (
    MIN_OPSET,
    along,
    emit,
    inverse_root,
    mean_of,
    variance_of,
)
from jax2onnx.passes.fusion.match import Match, constant, operands, producer, scalar
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel


def shift_of(match: Match, value: ir.Value, inv: ir.Value) -> tuple[ir.Value, Any] | None:
    """``(mean, beta)`` when ``value`` is ``neg(mean) * inv [+ beta]`` (``beta`` a constant
    or None)."""
    beta = None
    added = producer(value, "Add")
    if added is not None:
        for product, b in operands(added):
            if constant(b) is not None and producer(product, "Mul") is not None:
                value, beta = product, b
                match.take(added)
                break
        else:
            return None
    product = producer(value, "Mul")
    if product is None:
        return None
    for negated, other in operands(product):
        neg = producer(negated, "Neg")
        if other is inv and neg is not None:
            match.take(product, neg)
            return neg.inputs[0], beta
    return None


def keras_layer_norm(ctx: Any, add: ir.Node) -> bool:
    if ctx.opset < MIN_OPSET or ctx.normalization_mode == "force_decomposed":
        return False
    for scaled, rest in operands(add):
        product = producer(scaled, "Mul")
        for x, inv in operands(product) if product is not None else ():
            match = Match(ctx.graph, add)
            match.take(product)
            if _layer_norm(ctx, match, x, inv, rest):
                return True
    return False


def _layer_norm(ctx: Any, match: Match, x: ir.Value, inv: ir.Value, rest: ir.Value) -> bool:
    sqrt, gamma = inverse_root(match, inv)
    shift = shift_of(match, rest, inv) if sqrt is not None else None
    found = mean_of(shift[0]) if shift is not None else None
    added = producer(sqrt.inputs[0], "Add") if sqrt is not None else None
    if found is None or added is None or found[1] is not x:
        return False
    mean_node, _, axes = found
    for var, eps in operands(added):
        epsilon = scalar(eps)
        if epsilon is not None and variance_of(match, var, mean_node, x, axes):
            break
    else:
        return False
    match.take(added, sqrt, mean_node)
    dtype = match.anchor.outputs[0].dtype
    if x.shape is None or dtype is None or not has_kernel("LayerNormalization", dtype.numpy()):
        return False
    normal = tuple(x.shape[a] for a in axes)
    if not all(isinstance(n, int) for n in normal):
        return False
    r, np_dtype = len(x.shape), dtype.numpy()
    scale = np.ones(normal, np_dtype) if gamma is None else along(gamma, r, axes, normal)
    bias = None if shift[1] is None else along(shift[1], r, axes, normal)
    if scale is None or (shift[1] is not None and bias is None) or not match.closed():
        return False
    return emit(ctx, match, x, axes, epsilon, scale, bias)


REWRITES = ((("Add",), keras_layer_norm),)
