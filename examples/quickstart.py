"""Quickstart: convert a JAX MLP with a symbolic batch dimension and check it.

Run: python examples/quickstart.py [output.onnx]
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx import allclose, to_onnx


def init_mlp(key, sizes=(30, 64, 64, 10)):
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        key, k_w = jax.random.split(key)
        params.append((jax.random.normal(k_w, (d_in, d_out)) / np.sqrt(d_in), jnp.zeros(d_out)))
    return params


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return jax.nn.softmax(x @ w + b, axis=-1)


def main(path: str = "mlp.onnx") -> int:
    params = init_mlp(jax.random.key(0))
    model_fn = lambda x: mlp(params, x)  # noqa: E731

    start = time.perf_counter()
    to_onnx(model_fn, [("B", 30)], return_mode="file", output_path=path)
    took = time.perf_counter() - start
    print(f"converted the MLP with input ('B', 30) to {path} in {took:.2f} s")

    import onnx

    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    print(f"graph: input {model.graph.input[0].name}{dims}, {len(ops)} nodes: {' '.join(ops)}")

    ok = True
    for batch in (1, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 30)).astype(np.float32)
        match, message = allclose(model_fn, path, [x], rtol=1e-5, atol=1e-6)
        print(f"batch {batch}: ONNX Runtime vs JAX: {message}")
        ok &= match
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
