"""A pseudo-spectral solver exported to ONNX: the viscous Burgers equation.

``u_t = nu u_xx - u u_x`` on a periodic grid of 64 points over ``[0, 2 pi)``;
derivatives by FFT (``rfft``, multiply by ``i k`` or ``-k^2``, ``irfft``),
20 steps of Heun's method (RK2) in a ``jax.lax.fori_loop``. The ONNX model
takes the initial state and returns the final one, in float32 and float64
(``enable_double_precision``); ONNX Runtime's results are compared with JAX's.

Run: python examples/spectral_burgers.py [output.onnx]
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import allclose, to_onnx

N, STEPS, NU, DT = 64, 20, 0.05, 1e-3


def burgers(u0):
    """The state after ``STEPS`` steps from ``u0`` (shape ``[..., N]``)."""
    k = np.fft.rfftfreq(N, 1.0 / N)  # wave numbers 0 .. N/2
    ik = (1j * k).astype(jnp.result_type(u0.dtype, np.complex64))
    minus_k2 = -(k**2)

    def rhs(u):
        spectrum = jnp.fft.rfft(u)
        ux = jnp.fft.irfft(ik * spectrum)
        uxx = jnp.fft.irfft(minus_k2 * spectrum)
        return NU * uxx - u * ux

    def heun(_, u):
        k1 = rhs(u)
        return u + 0.5 * DT * (k1 + rhs(u + DT * k1))

    return jax.lax.fori_loop(0, STEPS, heun, u0)


def op_types(graph) -> set[str]:
    """The op types of ``graph`` and of its subgraphs (the loop body)."""
    ops = set()
    for node in graph.node:
        ops.add(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops |= op_types(attr.g)
    return ops


def main(path: str = "spectral_burgers.onnx") -> int:
    x = np.linspace(0.0, 2 * np.pi, N, endpoint=False)
    ok = True
    for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-10)):
        double = dtype == np.float64
        u0 = np.stack([np.sin(x), 0.5 + np.cos(2 * x) * np.sin(x)]).astype(dtype)
        to_onnx(
            burgers,
            [("B", N)],
            enable_double_precision=double,
            return_mode="file",
            output_path=path,
        )
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: u0})[0]
        with jax.enable_x64(double):
            want = np.asarray(burgers(u0))
        ops = sorted(op_types(onnx.load(path).graph))
        error, scale = np.abs(got - want).max(), np.abs(want).max()
        print(f"{np.dtype(dtype).name}: ops {' '.join(ops)}")
        print(f"  max |ONNX Runtime - JAX| = {error:.3g} (max |u| = {scale:.3g})")
        match, message = allclose(
            burgers, path, [u0], rtol=tol, atol=tol, enable_double_precision=double
        )
        print(f"  allclose(rtol=atol={tol:g}): {message}")
        ok &= match
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
