"""An inference batch norm folded into the ``Conv``, ``Gemm`` or ``MatMul`` before it.

In inference a batch norm is a per-channel affine map: Haiku's and Flax's
``(y - mean) * (scale * rsqrt(var + eps)) + offset`` becomes, once
:class:`~jax2onnx.passes.FoldConstantsPass` has computed the constant parts,
a chain of ``Add``/``Sub``/``Mul``/``Div`` by per-channel constants (``y * a +
c`` for Flax NNX on channels-last inputs); Flax NNX on channels-first inputs
emits a ``BatchNormalization`` with constant statistics, which is
``y * a + c`` with ``a = scale / sqrt(var + eps)``, ``c = bias - mean * a``.

Matched: a ``Conv`` (or a ``Gemm``, or a ``MatMul`` by a 2-D weight) with
constant weights, then (through one ``Transpose`` for a channels-last conv)
a chain of such nodes, each the sole reader of the one before, whose
constants vary along the output-channel axis only; the chain must scale
(a per-channel ``Mul``/``Div`` or a ``BatchNormalization``): a bias alone, or
a scalar multiple (attention's ``1/sqrt(d)``), is left as it is. Since the
product is linear in its weights, ``conv(x, W, b) * a + c = conv(x, W * a,
b * a + c)`` with ``a`` along ``W``'s output-channel axis: the same function.
The folded weights are new constants computed in float64 and rounded once
to the graph's dtype, so the numbers move by the dtype's rounding (the
original weights stay for their other readers and go when none is left).
With ``normalization_mode="force_decomposed"`` nothing is folded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.channels import per_channel
from jax2onnx.passes.fusion.layer_norm import sole_user
from jax2onnx.passes.fusion.match import (
    DEFAULT_DOMAINS,
    Match,
    constant,
    int_attr,
    node,
    rank,
)
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel

AFFINE = ("Mul", "Div", "Add", "Sub")


def affine_chain(
    value: ir.Value, r: int, axis: int, size: int
) -> tuple[list[ir.Node], np.ndarray, np.ndarray, bool]:
    """``(nodes, a, c, scales)``: the longest chain of sole readers from ``value`` that
    computes ``value * a + c`` with ``a``, ``c`` of shape ``[size]`` along ``axis``;
    ``scales`` tells whether one of them multiplies by a per-channel constant."""
    a, c = np.ones(size), np.zeros(size)
    nodes: list[ir.Node] = []
    scales = False
    while not value.is_graph_output():
        uses = list(value.uses())
        if len(uses) != 1 or uses[0].node.domain not in DEFAULT_DOMAINS:
            break
        user, index = uses[0].node, uses[0].idx
        if user.op_type in AFFINE and len(user.inputs) == 2:
            other = user.inputs[1 - index]
            k = per_channel(other, r, axis, size) if other is not value else None
            if k is None or (user.op_type == "Div" and index != 0):
                break
            if user.op_type in ("Mul", "Div"):
                k = k if user.op_type == "Mul" else 1.0 / k
                a, c = a * k, c * k
                scales = scales or constant(other).size > 1
            elif user.op_type == "Add":
                c = c + k
            elif index == 0:  # value - k
                c = c - k
            else:  # k - value
                a, c = -a, k - c
        elif user.op_type == "BatchNormalization" and index == 0 and axis == 1:
            found = _inference_batch_norm(user, size)
            if found is None:
                break
            a, c = a * found[0], c * found[0] + found[1]
            scales = True
        else:
            break
        nodes.append(user)
        value = user.outputs[0]
    return nodes, a, c, scales


def _inference_batch_norm(bn: ir.Node, size: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(a, c)`` of a ``BatchNormalization`` with constant parameters in inference mode."""
    params = [constant(v) for v in bn.inputs[1:5]]
    if len(params) != 4 or any(p is None or p.shape != (size,) for p in params):
        return None
    if int_attr(bn, "training_mode", 0) or len(bn.outputs) != 1:
        return None
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    eps = bn.attributes.get("epsilon")
    a = scale / np.sqrt(var + (eps.as_float() if eps is not None else 1e-5))
    return a, bias - mean * a


def fold_batch_norm(ctx: Any, op: ir.Node) -> bool:
    if ctx.normalization_mode == "force_decomposed":
        return False
    out = op.outputs[0]
    dtype = out.dtype
    if dtype is None or dtype.numpy().kind != "f" or not has_kernel(op.op_type, dtype.numpy()):
        return False
    np_dtype = dtype.numpy()
    weight = constant(op.inputs[1])
    if weight is None or (op.op_type != "Conv" and weight.ndim != 2):
        return False
    if op.op_type == "Conv":  # (N, C, *spatial), the rank of the weight
        r, size, axis = weight.ndim, weight.shape[0], 1
    elif op.op_type == "Gemm":
        r, size, axis = 2, weight.shape[0 if int_attr(op, "transB", 0) else 1], 1
    else:
        r = rank(out) or rank(op.inputs[0])
        if r is None:
            return False
        size, axis = weight.shape[1], r - 1
    bias = None
    if len(op.inputs) > 2 and op.inputs[2] is not None:
        bias = constant(op.inputs[2])
        if bias is None:
            return False
    transpose = sole_user(out, "Transpose") if op.op_type == "Conv" else None
    start = out
    if transpose is not None:
        axis = list(transpose.attributes["perm"].as_ints()).index(1)
        start = transpose.outputs[0]
    chain, a, c, scales = affine_chain(start, r, axis, size)
    if not scales:
        return False
    match = Match(ctx.graph, chain[-1])
    match.take(op, *([transpose] if transpose is not None else []), *chain)
    if not match.closed():
        return False
    nodes = _folded(ctx, op, weight, bias, a, c, np_dtype)
    if transpose is not None:
        perm = transpose.attributes["perm"].as_ints()
        nodes[-1].outputs[0].dtype, nodes[-1].outputs[0].shape = dtype, out.shape
        nodes.append(node("Transpose", [nodes[-1].outputs[0]], perm=list(perm)))
    return match.replace(nodes, nodes[-1].outputs[0])


def _folded(
    ctx: Any,
    op: ir.Node,
    weight: np.ndarray,
    bias: np.ndarray | None,
    a: np.ndarray,
    c: np.ndarray,
    np_dtype: Any,
) -> list[ir.Node]:
    """The product with ``a`` and ``c`` folded into its weights (and, for a MatMul, the
    ``Add`` of the folded shift)."""
    w, x = weight.astype(np.float64), op.inputs[0]
    if op.op_type == "MatMul":
        product = node("MatMul", [x, ctx.constant((w * a).astype(np_dtype), "matmul_w")])
        if not np.any(c):
            return [product]
        product.outputs[0].dtype = op.outputs[0].dtype
        product.outputs[0].shape = op.outputs[0].shape
        shift = ctx.constant(c.astype(np_dtype), "matmul_c")
        return [product, node("Add", [product.outputs[0], shift])]
    b = np.zeros_like(a) if bias is None else bias.astype(np.float64)
    if op.op_type == "Conv":
        w = w * a.reshape((-1,) + (1,) * (w.ndim - 1))
    else:  # Gemm: alpha * x @ (w * a) + (beta * b * a + c), beta now 1
        w = w * (a[:, None] if int_attr(op, "transB", 0) else a[None, :])
        beta = op.attributes.get("beta")
        b = b * (beta.as_float() if beta is not None else 1.0)
    b = b * a + c
    inputs = [
        x,
        ctx.constant(w.astype(np_dtype), f"{op.op_type.lower()}_w"),
        ctx.constant(b.astype(np_dtype), f"{op.op_type.lower()}_b"),
    ]
    attributes = [v for k, v in op.attributes.items() if k != "beta"]
    return [ir.Node("", op.op_type, inputs, attributes=attributes, num_outputs=1)]


REWRITES = ((("Conv", "Gemm", "MatMul"), fold_batch_norm),)
