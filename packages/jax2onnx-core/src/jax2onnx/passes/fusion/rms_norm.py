"""``RMSNormalization`` (opset >= 23) from an RMS norm written in ``jnp``.

Matched (after the canonical forms; ``mean`` is ``ReduceMean`` over trailing
axes with ``keepdims=1``)::

    ms = mean(x * x)  |  mean(x ** 2)   [broadcast to x's shape: Haiku]
    n = x * reciprocal(sqrt(ms + eps))  |  x / sqrt(ms + eps)
      | x * (scale * reciprocal(sqrt(ms + eps)))  |  (x * scale) * reciprocal(...)
    y = n [* scale]

which is ONNX's ``RMSNormalization(x, scale, axis, epsilon)`` by definition
(``x / sqrt(mean(x^2) + eps) * scale`` over the axes from ``axis`` on), so
the fused op computes the same function; ``scale`` must be a constant that
varies only along the normalised axes (Gemma's ``1 + w`` is one once folded).

transformers' Llama and Gemma norms compute in float32 between two Casts,
``cast(norm(cast(x, f32)) [* scale], dtype)``. For a float16 ``x`` the Casts
go too: ``RMSNormalization`` on float16 computes its statistics in float32
(``stash_type=1``), and the scale that follows the Cast back joins the op.
For other dtypes (float64: the model chose float32 on purpose) the Casts stay
and the float32 part is fused. ``eps`` outside the square root, a reduction
over leading axes or a statistic read elsewhere leave the graph alone, as
does ``normalization_mode="force_decomposed"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import static_or_symbolic
from jax2onnx.passes.fusion.layer_norm import (
    along,
    begin,
    constant_user,
    inverse_root,
    mean_of,
    sole_user,
    square_of,
)
from jax2onnx.passes.fusion.match import (
    Match,
    constant,
    int_attr,
    node,
    operands,
    producer,
    scalar,
)
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel

MIN_OPSET = 23
# dtypes whose norm transformers computes in float32 and RMSNormalization does too
_NARROW = (np.dtype(np.float16),)


def root_mean_square(
    match: Match, core: ir.Node
) -> tuple[ir.Value, tuple[int, ...], float, ir.Value | None] | None:
    """``(x, axes, eps, scale)`` when ``core`` computes ``x / sqrt(mean(x^2) + eps)``
    (``scale`` is the constant multiplied into the reciprocal root, else None)."""
    scale = None
    if core.op_type == "Div":
        x, root = core.inputs
        sqrt = producer(root, "Sqrt")
    else:
        for candidate, r in operands(core):
            sqrt, scale = inverse_root(match, r)
            if sqrt is not None:
                x = candidate
                break
        else:
            return None
    add = producer(sqrt.inputs[0], "Add") if sqrt is not None else None
    if add is None:
        return None
    for ms, eps in operands(add):
        epsilon = scalar(eps)
        broadcast = producer(ms, "Expand")  # Haiku broadcasts the mean square to x's shape
        if broadcast is not None and not _same_shape(broadcast.outputs[0], x):
            continue
        found = mean_of(broadcast.inputs[0] if broadcast is not None else ms)
        squared = square_of(found[1]) if found is not None else None
        if epsilon is None or squared is None:
            continue
        base, factor = x, scale
        if squared[1] is not base:  # Haiku's (x * scale) * rsqrt(...)
            base, factor = _scaled(match, base, squared[1], factor)
        if base is squared[1]:
            match.take(sqrt, add, found[0], squared[0])
            if broadcast is not None:
                match.take(broadcast)
            return base, found[2], epsilon, factor
    return None


def _same_shape(value: ir.Value, other: ir.Value) -> bool:
    shape = static_or_symbolic(value)
    return shape is not None and shape == static_or_symbolic(other)


def _scaled(
    match: Match, value: ir.Value, x: ir.Value, scale: ir.Value | None
) -> tuple[ir.Value | None, ir.Value | None]:
    """``(x, scale)`` when ``value`` is ``x * scale`` with a constant ``scale`` (and no
    scale was found inside the root); ``(None, None)`` otherwise."""
    product = producer(value, "Mul")
    if product is None or scale is not None:
        return None, None
    for candidate, factor in operands(product):
        if candidate is x and constant(factor) is not None:
            match.take(product)
            return x, factor
    return None, None


def rms_norm(ctx: Any, core: ir.Node) -> bool:
    started = begin(ctx, core, root_mean_square, MIN_OPSET)
    if started is None:
        return False
    probe, (x, axes, eps, inner_scale), normal = started
    for narrow in (True, False):  # without the Cast pair first, then the float32 part only
        if _fuse(ctx, probe, core, x, axes, eps, inner_scale, normal, narrow):
            return True
    return False


def _fuse(
    ctx: Any,
    probe: Match,
    core: ir.Node,
    x: ir.Value,
    axes: tuple[int, ...],
    eps: float,
    inner_scale: ir.Value | None,
    normal: tuple[int, ...],
    narrow: bool,
) -> bool:
    r = len(x.shape)
    np_dtype = core.outputs[0].dtype.numpy()
    anchor, tail = core, []
    dims = static_or_symbolic(x)  # Haiku's scale may be broadcast to x's static shape
    scale = along(inner_scale, r, axes, normal, dims) if inner_scale is not None else None
    if inner_scale is not None and scale is None:
        return False
    if scale is None:
        found = constant_user(anchor.outputs[0], "Mul", r, axes, normal, dims)
        if found is not None:
            anchor, scale = found
            tail.append(anchor)
    if narrow:
        widen = producer(x, "Cast")
        source = widen.inputs[0] if widen is not None else None
        back = sole_user(anchor.outputs[0], "Cast")
        if source is None or back is None or source.dtype is None or np_dtype != np.float32:
            return False
        outer = source.dtype.numpy()
        if outer not in _NARROW or int_attr(back, "to", 0) != source.dtype.value:
            return False
        x, anchor, np_dtype = source, back, outer
        tail += [widen, back]
        if scale is None:
            found = constant_user(anchor.outputs[0], "Mul", r, axes, normal, dims)
            if found is not None:
                anchor, scale = found
                tail.append(anchor)
    if not has_kernel("RMSNormalization", np_dtype):
        return False
    match = Match(ctx.graph, anchor)
    match.take(*probe.nodes, *tail)
    if not match.closed():
        return False
    if scale is None:
        scale = np.ones(normal, np_dtype)
    fused = node(
        "RMSNormalization",
        [x, ctx.constant(np.asarray(scale).astype(np_dtype), "rms_scale")],
        axis=r - len(axes),
        epsilon=eps,
        stash_type=11 if np_dtype == np.float64 else None,
    )
    return match.replace([fused], fused.outputs[0])


REWRITES = ((("Div", "Mul"), rms_norm),)
