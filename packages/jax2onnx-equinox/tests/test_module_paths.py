"""Field paths of Equinox models in the node metadata."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from jax2onnx import to_onnx


class Net(eqx.Module):
    layers: list

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(3, 4, key=k1), eqx.nn.Linear(4, 2, key=k2)]

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


def test_layers_carry_their_field_path():
    proto = to_onnx(Net(jax.random.key(0)), [(3,)])
    modules = {
        p.value for n in proto.graph.node for p in n.metadata_props if p.key == "jax2onnx.module"
    }
    assert modules == {"layers.0", "layers.1"}
    matmuls = [n for n in proto.graph.node if n.op_type == "MatMul"]
    assert [n.name.split("/")[0] for n in matmuls] == ["layers.0", "layers.1"]
