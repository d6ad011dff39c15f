"""``GroupNormalization`` (opset >= 21) from a group norm written in ``jnp``.

Matched (Haiku's ``GroupNorm`` and the usual hand-written form; ``x`` has
``C`` channels, static, and the group axis ``G`` is static)::

    g = reshape(x, (N, G, C/G, *S))    # channels-first, or
    g = reshape(x, (N, *S, G, C/G))    # channels-last
    n = (g - mean(g)) / sqrt(var(g) + eps)    # any form layer_norm.py reads,
                                              # over (C/G, *S) of each group
    y = reshape(n, x.shape) [* scale] [+ bias]   # scale, bias: per channel

Channels-first, the normalisation over the trailing axes is already a
``LayerNormalization`` (unit scale, no bias) when this runs; that form is read
too. ONNX's ``GroupNormalization`` at opset 21 normalises each group of
``C/G`` channels of an ``(N, C, ...)`` input over its channels and spatial
axes, then applies a per-channel scale and bias: the same arithmetic, so the
fused op computes the same function (float64 with ``stash_type`` double: ONNX
Runtime computes the statistics in float32 otherwise). Opset 18's op scales
per group and is not used.

Channels-last inputs of rank > 2 need a Transpose on each side of the op:
fused only when that still removes nodes (it always does: a decomposed group
norm is a dozen nodes). A mean over other axes, a scale varying along other
axes than the channels', a statistic read elsewhere and
``normalization_mode="force_decomposed"`` leave the graph alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import static_or_symbolic
from jax2onnx.passes.fusion.channels import per_channel
from jax2onnx.passes.fusion.layer_norm import normalised, sole_user
from jax2onnx.passes.fusion.match import Match, constant, node, producer
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel

MIN_OPSET = 21


def grouped_statistics(match: Match, value: ir.Value) -> tuple[ir.Value, tuple, float] | None:
    """``(g, axes, eps)`` when ``value`` normalises ``g`` over ``axes`` without an affine."""
    ln = producer(value, "LayerNormalization")
    if ln is not None:
        g = ln.inputs[0]
        r = len(g.shape) if g.shape is not None else None
        scale = constant(ln.inputs[1])
        bias = constant(ln.inputs[2]) if len(ln.inputs) > 2 and ln.inputs[2] is not None else None
        if r is None or scale is None or not np.all(scale == 1):
            return None
        if bias is not None and np.any(bias != 0) or len(ln.outputs) != 1:
            return None
        axis = ln.attributes.get("axis")
        eps = ln.attributes.get("epsilon")
        first = (axis.as_int() if axis is not None else -1) % r
        match.take(ln)
        return g, tuple(range(first, r)), eps.as_float() if eps is not None else 1e-5
    core = producer(value, "Div", "Mul")
    if core is None:
        return None
    found = normalised(match, core, trailing=False)
    if found is None or found[3] is not None:
        return None
    match.take(core)
    return found[0], found[1], found[2]


def layout(x: tuple, g: tuple, axes: tuple) -> tuple[int, int] | None:
    """``(channel axis, groups)`` when ``g`` is ``x`` with its channels split in groups and
    ``axes`` are each group's channels and spatial axes (channels-first or -last)."""
    r = len(x)
    if len(g) != r + 1 or r < 2:
        return None
    c = x[1]
    if isinstance(c, int) and isinstance(g[1], int) and g[1] * g[2] == c:
        if g == (x[0], g[1], g[2], *x[2:]) and axes == tuple(range(2, r + 1)):
            return 1, g[1]
    c = x[-1]
    if r > 2 and isinstance(c, int) and isinstance(g[-2], int) and g[-2] * g[-1] == c:
        if g == (*x[:-1], g[-2], g[-1]) and axes == (*range(1, r - 1), r):
            return r - 1, g[-2]
    return None


def group_norm(ctx: Any, back: ir.Node) -> bool:
    if ctx.opset < MIN_OPSET or ctx.normalization_mode == "force_decomposed":
        return False
    probe = Match(ctx.graph, back)
    found = grouped_statistics(probe, back.inputs[0])
    if found is None:
        return False
    g, axes, eps = found
    split = producer(g, "Reshape")
    x = split.inputs[0] if split is not None else None
    shapes = [static_or_symbolic(v) for v in (x, g, back.outputs[0])]
    if any(s is None for s in shapes) or shapes[0] != shapes[2]:
        return False
    found_layout = layout(shapes[0], shapes[1], axes)
    dtype = back.outputs[0].dtype
    if found_layout is None or dtype is None:
        return False
    axis, groups = found_layout
    r, channels = len(shapes[0]), shapes[0][axis]
    np_dtype = dtype.numpy()
    if not has_kernel("GroupNormalization", np_dtype):
        return False
    anchor, affine, tail = back, {}, [split]
    for op_type in ("Mul", "Add"):  # the per-channel scale, then the bias
        user = sole_user(anchor.outputs[0], op_type)
        if user is None:
            continue
        other = user.inputs[1] if user.inputs[0] is anchor.outputs[0] else user.inputs[0]
        array = per_channel(other, r, axis, channels)
        if array is not None:
            affine[op_type], anchor = array, user
            tail.append(user)
    match = Match(ctx.graph, anchor)
    match.take(*probe.nodes, *tail)
    made = 1 if axis == 1 else 3  # the op, and a Transpose each side for channels-last
    if made >= len(match.nodes) or not match.closed():
        return False
    scale = affine.get("Mul", np.ones(channels))
    bias = affine.get("Add", np.zeros(channels))
    nodes, source = [], x
    if axis != 1:  # channels-last: (N, *S, C) -> (N, C, *S) and back
        perm = [0, r - 1, *range(1, r - 1)]
        nodes.append(node("Transpose", [x], perm=perm))
        source = nodes[-1].outputs[0]
    nodes.append(
        node(
            "GroupNormalization",
            [
                source,
                ctx.constant(scale.astype(np_dtype), "gn_scale"),
                ctx.constant(bias.astype(np_dtype), "gn_bias"),
            ],
            num_groups=groups,
            epsilon=eps,
            stash_type=11 if np_dtype == np.float64 else None,
        )
    )
    if axis != 1:
        nodes.append(node("Transpose", [nodes[-1].outputs[0]], perm=[0, *range(2, r), 1]))
    if axis != 1:
        first = [x.shape[p] for p in (0, r - 1, *range(1, r - 1))]
        for inner in nodes[:-1]:
            inner.outputs[0].dtype, inner.outputs[0].shape = dtype, ir.Shape(first)
    return match.replace(nodes, nodes[-1].outputs[0])


REWRITES = ((("Reshape",), group_norm),)
