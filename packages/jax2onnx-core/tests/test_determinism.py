"""The same model converted in two processes gives the same bytes, whatever the hash seed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys

    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax2onnx import onnx_function, to_onnx

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 4)).astype(np.float32)


    @onnx_function
    def block(x):
        return jax.nn.gelu(x @ w1) @ w2


    def model(x, steps):
        def body(carry, _):
            return jnp.tanh(carry) * 0.5, carry.sum(-1)

        h = block(x)
        h, trace = jax.lax.scan(body, h, None, length=3)
        h = jax.lax.cond(steps > 0, lambda v: jax.nn.softmax(v), lambda v: -v, h)
        return {"out": h, "trace": trace, "top": jax.lax.top_k(h, 2)[1]}


    to_onnx(model, [("B", 8)], input_params={"steps": 1},
            return_mode="file", output_path=sys.argv[1])
    """
)


def _convert(tmp_path, seed: str) -> str:
    path = tmp_path / f"model_{seed}.onnx"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env, check=True, timeout=300)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_processes_with_different_hash_seeds_write_identical_files(tmp_path):
    assert _convert(tmp_path, "1") == _convert(tmp_path, "987654")
