"""``LayerNormalization`` (opset >= 17) from a layer norm written in ``jnp``.

Matched (after the canonical forms; ``mean`` is ``ReduceMean`` over trailing
axes with ``keepdims=1``, the same axes throughout)::

    d = x - mean(x)
    var = mean(d * d)  |  mean(x * x) - mean(x) * mean(x)  |  max(0, that)
    n = d / sqrt(var + eps)  |  d * reciprocal(sqrt(var + eps))
    y = n [* scale] [+ bias]

``scale`` and ``bias`` must vary only along the normalised axes (a constant
of shape ``[H]`` or ``[1, 1, H]``). ``eps`` added outside the square root is
a different function and is left alone, as is a normalisation over leading
axes. With ``normalization_mode="force_decomposed"`` nothing is fused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.match import (
    Match,
    constant,
    node,
    operands,
    producer,
    rank,
    reduced_axes,
    scalar,
)
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel

MIN_OPSET = 17


def mean_of(
    value: ir.Value | None, trailing: bool = True
) -> tuple[ir.Node, ir.Value, tuple[int, ...]] | None:
    """``(node, x, axes)`` when ``value`` is ``ReduceMean(x, axes, keepdims=1)`` over
    trailing axes (any axes with ``trailing=False``, for group norms)."""
    reduce = producer(value, "ReduceMean")
    if reduce is None:
        return None
    keep = reduce.attributes.get("keepdims")
    x = reduce.inputs[0]
    r = rank(x)
    if (keep is not None and keep.as_int() != 1) or r is None:
        return None
    axes = reduced_axes(reduce, r)
    if not axes or (trailing and axes != tuple(range(r - len(axes), r))):
        return None
    return reduce, x, axes


def square_of(value: ir.Value | None) -> tuple[ir.Node, ir.Value] | None:
    """``(node, a)`` when ``value`` is ``a * a`` or ``a ** 2``."""
    mul = producer(value, "Mul")
    if mul is not None and mul.inputs[0] is mul.inputs[1]:
        return mul, mul.inputs[0]
    power = producer(value, "Pow")
    if power is not None and scalar(power.inputs[1]) == 2.0:
        return power, power.inputs[0]
    return None


def normalised(
    match: Match, core: ir.Node, trailing: bool = True
) -> tuple[ir.Value, tuple[int, ...], float, ir.Value | None] | None:
    """``(x, axes, eps, scale)`` when ``core`` computes ``(x - mean) / sqrt(var + eps)``,
    or ``(x - mean) * (scale * rsqrt(var + eps))`` (Haiku's order; else ``scale`` is None).
    The statistics reduce trailing axes, or any axes with ``trailing=False``."""
    scale = None
    if core.op_type == "Div":
        d, root = core.inputs
        sqrt = producer(root, "Sqrt")
    else:  # Mul(d, [scale *] Reciprocal(Sqrt)) in either order
        for candidate, r in operands(core):
            sqrt, scale = inverse_root(match, r)
            if sqrt is not None:
                d = candidate
                break
        else:
            return None
    sub = producer(d, "Sub")
    if sqrt is None or sub is None:
        return None
    found = mean_of(sub.inputs[1], trailing)
    add = producer(sqrt.inputs[0], "Add")
    if found is None or add is None:
        return None
    mean_node, x, axes = found
    if sub.inputs[0] is not x:
        return None
    for var, eps in operands(add):
        epsilon = scalar(eps)
        if epsilon is not None and variance_of(match, var, mean_node, x, axes, trailing):
            match.take(sub, mean_node, sqrt, add)
            return x, axes, epsilon, scale
    return None


def inverse_root(match: Match, value: ir.Value) -> tuple[ir.Node | None, ir.Value | None]:
    """``(Sqrt node, scale)`` when ``value`` is ``[scale *] Reciprocal(Sqrt(...))``."""
    reciprocal = producer(value, "Reciprocal")
    if reciprocal is not None:
        sqrt = producer(reciprocal.inputs[0], "Sqrt")
        if sqrt is not None:
            match.take(reciprocal)
        return sqrt, None
    scaled = producer(value, "Mul")
    if scaled is None:
        return None, None
    for r, scale in operands(scaled):
        reciprocal = producer(r, "Reciprocal")
        sqrt = producer(reciprocal.inputs[0], "Sqrt") if reciprocal is not None else None
        if sqrt is not None and constant(scale) is not None:
            match.take(scaled, reciprocal)
            return sqrt, scale
    return None, None


def variance_of(
    match: Match,
    var: ir.Value,
    mean_node: ir.Node,
    x: ir.Value,
    axes: tuple,
    trailing: bool = True,
) -> bool:
    """Whether ``var`` is the variance of ``x`` over ``axes`` given its mean ``mean_node``:
    ``mean((x - mean) ** 2)``, ``mean(x ** 2) - mean ** 2`` or ``max(0, either)``."""
    clipped = producer(var, "Max")
    if clipped is not None:
        for inner, zero in operands(clipped):
            if scalar(zero) == 0.0 and variance_of(match, inner, mean_node, x, axes, trailing):
                return match.take(clipped)
        return False
    found = mean_of(var, trailing)
    if found is not None and found[2] == axes:
        squared = square_of(found[1])
        centred = producer(squared[1], "Sub") if squared is not None else None
        if (
            centred is not None
            and centred.inputs[0] is x
            and centred.inputs[1] is mean_node.outputs[0]
        ):
            return match.take(found[0], squared[0], centred)  # mean((x - mean) ** 2)
    difference = producer(var, "Sub")
    if difference is None:
        return False
    second, first = mean_of(difference.inputs[0], trailing), square_of(difference.inputs[1])
    if second is None or first is None or second[2] != axes or first[1] is not mean_node.outputs[0]:
        return False
    squared_x = square_of(second[1])
    if squared_x is None or squared_x[1] is not x:
        return False
    return match.take(difference, second[0], first[0], squared_x[0])  # E[x^2] - E[x]^2


def sole_user(value: ir.Value, op_type: str) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or uses[0].node.op_type != op_type or uses[0].node.domain != "":
        return None
    return uses[0].node


def along(
    value: ir.Value,
    x_rank: int,
    axes: tuple[int, ...],
    normal: tuple[int, ...],
    dims: tuple[Any, ...] | None = None,
) -> Any:
    """``value`` as an array of the normalised shape, when it is a constant that varies
    only along the normalised axes; ``None`` otherwise. Given the input's shape ``dims``,
    a constant as large as the input along other axes but equal along them (what
    ``jnp.broadcast_to(scale, x.shape)`` gives for a static shape) is one too."""
    array = constant(value)
    if array is None or array.ndim > x_rank:
        return None
    padded = array.reshape((1,) * (x_rank - array.ndim) + array.shape)
    for a in range(x_rank):
        if a in axes or padded.shape[a] == 1:
            continue
        if dims is None or dims[a] != padded.shape[a]:
            return None
        first = np.take(padded, [0], axis=a)
        if not np.array_equal(padded, np.broadcast_to(first, padded.shape)):
            return None
        padded = first
    trailing = padded.reshape(padded.shape[x_rank - len(axes) :])
    try:
        return np.ascontiguousarray(np.broadcast_to(trailing, normal))
    except ValueError:
        return None


def constant_user(
    value: ir.Value,
    op_type: str,
    x_rank: int,
    axes: tuple[int, ...],
    normal: tuple[int, ...],
    dims: tuple[Any, ...] | None = None,
) -> tuple[ir.Node, Any] | None:
    """``(node, array)`` when ``value``'s sole user is an ``op_type`` node whose other
    operand is a constant varying only along the normalised axes (see :func:`along`)."""
    user = sole_user(value, op_type)
    if user is None:
        return None
    other = user.inputs[1] if user.inputs[0] is value else user.inputs[0]
    array = along(other, x_rank, axes, normal, dims)
    return None if array is None else (user, array)


def begin(ctx: Any, core: ir.Node, find: Any, min_opset: int) -> Any:
    """``(probe, found, normalised shape)`` when ``find(probe, core)`` recognises a
    normalisation at ``core`` whose normalised dims are static, at ``min_opset`` or
    newer, outside ``force_decomposed``; ``None`` otherwise."""
    if ctx.opset < min_opset or ctx.normalization_mode == "force_decomposed":
        return None
    probe = Match(ctx.graph, core)
    found = find(probe, core)
    if found is None:
        return None
    x, axes = found[0], found[1]
    if x.shape is None or core.outputs[0].dtype is None:
        return None
    normal = tuple(x.shape[a] for a in axes)
    if not all(isinstance(n, int) for n in normal):
        return None
    return probe, found, normal


def layer_norm(ctx: Any, core: ir.Node) -> bool:
    started = begin(ctx, core, normalised, MIN_OPSET)
    if started is None:
        return False
    probe, (x, axes, eps, inner_scale), normal = started
    if not has_kernel("LayerNormalization", core.outputs[0].dtype.numpy()):
        return False
    r = len(x.shape)
    anchor, tail = core, []

    def absorb(op_type: str) -> Any:
        """The constant of the anchor's sole ``op_type`` user, which joins the pattern."""
        nonlocal anchor
        found = constant_user(anchor.outputs[0], op_type, r, axes, normal)
        if found is None:
            return None
        anchor = found[0]
        tail.append(anchor)
        return found[1]

    if inner_scale is not None:
        scale = along(inner_scale, r, axes, normal)
        if scale is None:
            return False
    else:
        scale = absorb("Mul")
    bias = absorb("Add")
    match = Match(ctx.graph, anchor)
    match.take(*probe.nodes, *tail)
    if not match.closed():
        return False
    return emit(ctx, match, x, axes, eps, scale, bias)


def emit(ctx: Any, match: Match, x: ir.Value, axes, eps: float, scale: Any, bias: Any) -> bool:
    """Replace ``match`` by ``LayerNormalization(x, scale, bias)`` over the trailing ``axes``
    (``scale`` ``None``: ones; arrays of the normalised shape)."""
    np_dtype = match.anchor.outputs[0].dtype.numpy()
    normal = tuple(x.shape[a] for a in axes)
    if scale is None:
        scale = np.ones(normal, np_dtype)
    inputs = [x, ctx.constant(scale.astype(np_dtype), "ln_scale")]
    if bias is not None:
        inputs.append(ctx.constant(bias.astype(np_dtype), "ln_bias"))
    fused = node(
        "LayerNormalization",
        inputs,
        axis=len(x.shape) - len(axes),
        epsilon=eps,
        stash_type=11 if np_dtype == np.float64 else None,
    )
    return match.replace([fused], fused.outputs[0])


REWRITES = ((("Div", "Mul"), layer_norm),)
