"""Quickstart: convert a Flax NNX MLP with a symbolic batch dimension and check it.

Run: python examples/quickstart.py [output.onnx]
"""

from __future__ import annotations

import sys
import time

import numpy as np
from flax import nnx

from jax2onnx import allclose, to_onnx


class MLP(nnx.Module):
    """Linear -> BatchNorm -> Dropout -> gelu -> Linear."""

    def __init__(self, din: int, dmid: int, dout: int, *, rngs: nnx.Rngs) -> None:
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.dropout = nnx.Dropout(rate=0.1, rngs=rngs)
        self.bn = nnx.BatchNorm(dmid, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        x = nnx.gelu(self.dropout(self.bn(self.linear1(x))))
        return self.linear2(x)


def main(path: str = "mlp.onnx") -> int:
    model = MLP(30, 20, 10, rngs=nnx.Rngs(0))

    start = time.perf_counter()
    # Export uses inference semantics (BatchNorm running stats, Dropout off) on a
    # copy: `model` itself stays as it is, even in training mode.
    to_onnx(model, [("B", 30)], return_mode="file", output_path=path)
    took = time.perf_counter() - start
    print(f"converted the NNX MLP with input ('B', 30) to {path} in {took:.2f} s")

    import onnx

    exported = onnx.load(path)
    onnx.checker.check_model(exported, full_check=True)
    ops = [n.op_type for n in exported.graph.node]
    dims = [d.dim_param or d.dim_value for d in exported.graph.input[0].type.tensor_type.shape.dim]
    print(f"graph: input {exported.graph.input[0].name}{dims}, {len(ops)} nodes: {' '.join(ops)}")

    ok = True
    for batch in (1, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 30)).astype(np.float32)
        match, message = allclose(model, path, [x], rtol=1e-5, atol=1e-6)
        print(f"batch {batch}: ONNX Runtime vs JAX: {message}")
        ok &= match
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
