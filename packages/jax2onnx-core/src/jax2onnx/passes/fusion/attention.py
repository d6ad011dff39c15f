"""ONNX ``Attention`` (opset >= 23) from scaled dot-product attention written in ``jnp``.

Matched, anchored at the product with the values (after :mod:`.softmax`)::

    s = (Q @ K) [* c | / c]                      # Q (B, H, Sq, D), K (B, H, D, Sk)
    s = s [+ w | where(cond, s, fill)]...        # masks and biases, see .attention_mask
    o = Softmax(s, axis=-1) @ V                  # or (V^T @ Softmax(s)^T), then transposed

with Q, K and V read through Transposes (an ``einsum("bqhd,bkhd->bhqk")``
lowers to Transposes and a MatMul) and scalings by constants (Flax divides
the query by ``sqrt(depth)`` before the product): the scalings multiply into
``scale``, the Transposes compose into at most one per operand. When Q, K and
V are ``Transpose(Reshape(x, (B, S, H, D)), (0, 2, 1, 3))`` and the output goes
back through ``Transpose(0, 2, 1, 3)`` and a Reshape to ``(B, Sq, H*Dv)`` (the
projections of ``transformers`` models), the 3-D form takes ``x`` as it is
(``q_num_heads = kv_num_heads = H``) and no Transpose or Reshape remains;
otherwise the 4-D form gets the operands as ``(B, H, S, D)`` and the output is
permuted back to the layout the graph had.

Why it is exact: ``Attention`` computes ``softmax(Q K^T * scale + mask) V``,
the same products and softmax (ONNX Runtime scales the product by ``scale``
in float32: within rounding of the decomposed Div); the masks are translated
only where the result is JAX's in every row (:mod:`.attention_mask`). Only
dtypes ``has_kernel`` grants (float32: ONNX Runtime's float64 Attention is an
expansion that rounds the scale through float32), only operands of the same
batch and heads (no grouped heads), only when the logits and probabilities
are read by nothing else, and only when the fused graph has no more nodes.
"""

from __future__ import annotations

from typing import Any

from jax2onnx.passes.fusion.attention_mask import masks_for, uniform
from jax2onnx.passes.fusion.layout import (
    Walked,
    compose,
    identity,
    perm_of,
    scaled_by,
    shape_of,
    sole_user,
    transposed,
    walk,
)
from jax2onnx.passes.fusion.match import Match, int_attr, node, operands, producer
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel

MIN_OPSET = 23
SWAP = (0, 1, 3, 2)
HEADS_FIRST = (0, 2, 1, 3)


def logits(match: Match, value: ir.Value) -> tuple[ir.Node, float, list[tuple]] | None:
    """``(MatMul, scale, mask terms in order)`` when ``value`` is the scaled, masked
    product of Q and K; the nodes walked through join ``match``. (The caller checks
    that the product has the shape of ``value``: no term broadcast it.)"""
    terms: list[tuple] = []
    scale, scaled = 1.0, False
    while True:
        step = producer(value, "MatMul", "Add", "Where", "Mul", "Div")
        if step is None:
            return None
        if step.op_type == "MatMul":
            match.take(step)
            return step, scale, terms[::-1]
        if step.op_type in ("Mul", "Div"):
            found = scaled_by(step)
            if found is None:
                return None
            (value, factor), scaled = found, True
            scale *= factor
        elif scaled:
            return None  # a mask before the scaling scales the mask too: not matched
        elif step.op_type == "Where":
            fill = uniform(step.inputs[2])
            if fill is None:
                return None
            terms.append(("where", step.inputs[0], fill))
            value = step.inputs[1]
        else:
            inner = _score_operand(step)
            if inner is None:
                return None
            terms.append(("add", step.inputs[1] if inner is step.inputs[0] else step.inputs[0]))
            value = inner
        match.take(step)


def _score_operand(add: ir.Node) -> ir.Value | None:
    """The operand of ``add`` that carries the logits (the other one is a mask or bias)."""
    found = [a for a, _ in operands(add) if logits(Match(add.graph, add), a) is not None]
    return found[0] if len(found) == 1 else None


def _three_d(w: Walked) -> ir.Value | None:
    """``x`` when the operand is ``Transpose(Reshape(x), (0, 2, 1, 3))``, ``x`` of shape
    ``(B, S, H*D)`` split into ``(B, S, H, D)``."""
    reshape = producer(w.source, "Reshape")
    if w.perm != HEADS_FIRST or reshape is None:
        return None
    flat, split = shape_of(reshape.inputs[0]), shape_of(w.source)
    if flat is None or split is None or len(flat) != 3 or len(split) != 4:
        return None
    h, d = split[2], split[3]
    if flat[:2] != split[:2] or not isinstance(h, int) or not isinstance(d, int):
        return None
    return reshape.inputs[0] if flat[2] == h * d else None


def _dying(value: ir.Value, source: ir.Value) -> int:
    """How many nodes from ``value`` up to ``source`` are read only along that chain."""
    count = 0
    while value is not source and len(list(value.uses())) == 1 and not value.is_graph_output():
        step = value.producer()
        if step is None:
            break
        count += 1
        value = step.inputs[0]
    return count


def _operands(out_mm: ir.Node) -> tuple[ir.Node, ir.Value, tuple[int, ...], list] | None:
    """``(Softmax, V-side value, perm of V4 from it, nodes)`` and how the product reads them:
    ``Softmax(s) @ V`` or ``V^T @ Softmax(s)^T``."""
    probs, values = out_mm.inputs
    softmax = producer(probs, "Softmax")
    if softmax is not None:
        return softmax, values, identity(4), []
    flip = producer(values, "Transpose")
    if flip is None or perm_of(flip, 4) != SWAP:
        return None
    softmax = producer(flip.inputs[0], "Softmax")
    if softmax is None:
        return None
    return softmax, probs, SWAP, [flip]


def attention(ctx: Any, out_mm: ir.Node) -> bool:
    dtype = out_mm.outputs[0].dtype
    if ctx.opset < MIN_OPSET or dtype is None or not has_kernel("Attention", dtype.numpy()):
        return False
    found = _operands(out_mm)
    if found is None:
        return False
    softmax, v_side, v_perm, taken = found
    if int_attr(softmax, "axis", -1) % 4 != 3:
        return False
    match = Match(ctx.graph, out_mm)
    match.take(softmax, *taken)
    parsed = logits(match, softmax.inputs[0])
    if parsed is None:
        return False
    qk, scale, terms = parsed
    wq, wk, wv = walk(qk.inputs[0]), walk(qk.inputs[1]), walk(v_side, scales=False)
    if any(w is None or len(w.perm) != 4 for w in (wq, wk, wv)):
        return False
    k_perm, v_perm = compose(wk.perm, SWAP), compose(wv.perm, v_perm)
    q4, k4 = shape_of(wq.source, wq.perm), shape_of(wk.source, k_perm)
    v4 = shape_of(wv.source, v_perm)
    if q4 is None or k4 is None or v4 is None:
        return False
    if not (q4[:2] == k4[:2] == v4[:2] and q4[3] == k4[3] and k4[2] == v4[2]):
        return False
    if (*q4[:3], k4[2]) != shape_of(softmax.outputs[0]):
        return False  # a term broadcast the logits (or the shapes are unknown)
    scale *= wq.scale * wk.scale
    if not scale > 0.0:
        return False
    masks = masks_for(terms, q4[2], k4[2])
    if masks is None:
        return False

    # the output: a Transpose after the product composes into one; then maybe the Reshape
    anchor, out_perm = out_mm, SWAP if taken else identity(4)
    after = sole_user(out_mm.outputs[0], "Transpose")
    if after is not None:
        out_perm, anchor = compose(out_perm, perm_of(after, 4)), after
        match.take(after)
    flat = None
    sources = [_three_d(wq), _three_d(Walked(wk.source, k_perm, 1.0))]
    sources.append(_three_d(Walked(wv.source, v_perm, 1.0)))
    reshape = sole_user(anchor.outputs[0], "Reshape") if out_perm == HEADS_FIRST else None
    heads, dv = q4[1], v4[3]
    if reshape is not None and all(s is not None for s in sources):
        flat = shape_of(reshape.outputs[0])
        if not (isinstance(heads, int) and isinstance(dv, int)):
            flat = None
        elif flat != (q4[0], q4[2], heads * dv):
            flat = None
    chains = (qk.inputs[0], qk.inputs[1], v_side)
    perms = (wq.perm, k_perm, v_perm)
    if flat is not None:
        match.take(reshape)
        anchor, transposes = reshape, 0
        removed = sum(_dying(v, src) for v, src in zip(chains, sources, strict=True))
    else:
        transposes = sum(p != identity(4) for p in perms) + (out_perm != identity(4))
        removed = sum(_dying(v, w.source) for v, w in zip(chains, (wq, wk, wv), strict=True))
    match.anchor = anchor
    if 1 + transposes + masks.node_count() > len(match.nodes) + removed or not match.closed():
        return False

    new: list[ir.Node] = []  # decided: build
    heads_attrs = {}
    if flat is not None:
        inputs = sources
        heads_attrs = {"q_num_heads": q4[1], "kv_num_heads": k4[1]}
    else:
        inputs = [transposed(w.source, p, new) for w, p in zip((wq, wk, wv), perms, strict=True)]
    mask = masks.emit(ctx, out_mm, new)
    fused = node(
        "Attention",
        [*inputs, mask] if mask is not None else inputs,
        scale=float(scale),
        is_causal=1 if masks.causal else None,
        **heads_attrs,
    )
    new.append(fused)
    result = fused.outputs[0] if flat is not None else transposed(fused.outputs[0], out_perm, new)
    return match.replace(new, result)


REWRITES = ((("MatMul",), attention),)
