"""Module paths of NNX models in the node metadata, and ``verify`` naming the module."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jax2onnx import to_onnx, verify
from jax2onnx.plugin import Rules


class Block(nnx.Module):
    def __init__(self, dim, out, *, rngs):
        self.linear = nnx.Linear(dim, out, rngs=rngs)
        self.norm = nnx.LayerNorm(out, rngs=rngs)

    def __call__(self, x):
        return jnp.tanh(self.norm(self.linear(x)))


class Stack(nnx.Module):
    def __init__(self, *, rngs):
        self.blocks = nnx.List([Block(4, 6, rngs=rngs), Block(6, 5, rngs=rngs)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _props(node):
    return {p.key: p.value for p in node.metadata_props}


def test_layers_carry_their_path_in_the_model():
    model = Stack(rngs=nnx.Rngs(0))
    proto = to_onnx(model, [("B", 4)])
    paths = {
        n.op_type + str(i): _props(n).get("jax2onnx.module") for i, n in enumerate(proto.graph.node)
    }
    modules = [p for p in paths.values() if p]
    assert modules == ["blocks.0.linear", "blocks.0.norm", "blocks.1.linear", "blocks.1.norm"]
    gemm = next(n for n in proto.graph.node if n.op_type == "Gemm")
    assert gemm.name.startswith("blocks.0.linear/")
    assert _props(gemm)["jax2onnx.primitive"] == "flax.linear"
    assert _props(gemm)["jax2onnx.source"].startswith(__file__)


def test_verify_names_the_module_of_a_wrong_layer():
    rules = Rules("faulty_second_linear")

    @rules.lowering("flax.linear", override=True)
    def linear(ctx, *args, **params):  # off by 1e-3 in the 5-wide layer only
        out = ctx.fallback(*args, **params)
        if ctx.avals_out[0].shape[-1] == 5:
            out = ctx.op.Add(out, np.asarray(1e-3, np.float32))
        return out

    model = Stack(rngs=nnx.Rngs(0))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    report = verify(model, [x], extra_rules=rules)
    first = report.first
    assert first is not None, report.summary()
    assert (first.primitive, first.module) == ("flax.linear", "blocks.1.linear")
    assert "in blocks.1.linear" in report.summary()
    assert verify(model, [x]).ok
