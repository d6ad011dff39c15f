"""Plain tests: the ops in JAX (eager, jit, vmap, grad) and the plugin's discovery."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax2onnx_myops import ops


def _swish_ref(x: np.ndarray, g: np.ndarray, beta: float) -> np.ndarray:
    return x / (1.0 + np.exp(-beta * g))


def _inputs(shape: tuple[int, ...] = (3, 4)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal(shape).astype(np.float32),
        rng.standard_normal(shape).astype(np.float32),
    )


def test_swish_gate_eager_and_jit() -> None:
    x, g = _inputs()
    want = _swish_ref(x, g, 1.5)
    np.testing.assert_allclose(ops.swish_gate(x, g, beta=1.5), want, rtol=1e-6, atol=1e-6)
    jitted = jax.jit(ops.swish_gate, static_argnums=2)
    np.testing.assert_allclose(jitted(x, g, 1.5), want, rtol=1e-6, atol=1e-6)
    jaxpr = jax.make_jaxpr(lambda a, b: ops.swish_gate(a, b, 1.5))(x, g)
    assert [e.primitive.name for e in jaxpr.eqns] == ["myops.swish_gate"]


def test_swish_gate_vmap_keeps_one_primitive() -> None:
    x, g = _inputs((3, 4))
    batched = jax.vmap(ops.swish_gate, in_axes=(0, 1))
    np.testing.assert_allclose(batched(x, g.T), _swish_ref(x, g, 1.0), rtol=1e-6, atol=1e-6)
    unbatched_gate = jax.vmap(ops.swish_gate, in_axes=(0, None))(x, g[0])
    np.testing.assert_allclose(unbatched_gate, _swish_ref(x, g[0], 1.0), rtol=1e-6, atol=1e-6)
    names = [e.primitive.name for e in jax.make_jaxpr(batched)(x, g.T).eqns]
    assert names.count("myops.swish_gate") == 1


def test_swish_gate_grad() -> None:
    x, g = _inputs()
    beta = 0.7
    dx, dg = jax.grad(lambda a, b: ops.swish_gate(a, b, beta).sum(), argnums=(0, 1))(x, g)
    s = 1.0 / (1.0 + np.exp(-beta * g))
    np.testing.assert_allclose(dx, s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dg, beta * x * s * (1.0 - s), rtol=1e-5, atol=1e-6)
    # only one argument differentiated: the other tangent is a symbolic zero
    dx_only = jax.grad(lambda a: ops.swish_gate(a, g, beta).sum())(x)
    np.testing.assert_allclose(dx_only, s, rtol=1e-5, atol=1e-6)


def test_swish_gate_rejects_mismatched_operands() -> None:
    with pytest.raises(ValueError, match="one shape and dtype"):
        ops.swish_gate(jnp.ones(3), jnp.ones(4))


def test_fused_softclip_jax_and_macro_agree() -> None:
    x = np.linspace(-6.0, 6.0, 13, dtype=np.float32)
    want = x / (1.0 + np.abs(x) / 2.0)
    np.testing.assert_allclose(ops.fused_softclip(x, limit=2.0), want, rtol=1e-6)
    bound = ops.softclip_p.bind(jnp.asarray(x), limit=2.0)
    np.testing.assert_allclose(bound, want, rtol=1e-6)
    np.testing.assert_allclose(
        jax.jit(lambda a: ops.softclip_p.bind(a, limit=2.0))(x), want, rtol=1e-6
    )
    np.testing.assert_allclose(
        jax.vmap(lambda a: ops.softclip_p.bind(a, limit=2.0))(x[:, None]), want[:, None], rtol=1e-6
    )
    grad = jax.grad(lambda a: ops.softclip_p.bind(a, limit=2.0).sum())(jnp.asarray(x))
    np.testing.assert_allclose(grad, 1.0 / (1.0 + np.abs(x) / 2.0) ** 2, rtol=1e-5)


def test_plugin_is_discovered() -> None:
    import jax2onnx

    plugins = {p.name: p for p in jax2onnx.plugins().plugins}
    assert "myops" in plugins
    rules = plugins["myops"].rules
    assert {m.name: (m.batching, m.jvp) for m in rules.macros} == {
        "myops.swish_gate": ("explicit", "explicit"),
        "myops.softclip": ("elementwise", "explicit"),
    }


def test_interception_is_scoped_to_to_onnx() -> None:
    import jax2onnx

    original = ops.fused_softclip
    model = jax2onnx.to_onnx(
        lambda x: ops.fused_softclip(x, limit=2.0), [jax.ShapeDtypeStruct((2, 3), np.float32)]
    )
    assert ops.fused_softclip is original
    assert [n.op_type for n in model.graph.node] == ["Abs", "Div", "Add", "Div"]


def test_plugin_loads_when_imported_before_jax2onnx() -> None:
    """``import jax2onnx_myops`` first must not leave the plugin half-imported."""
    import subprocess
    import sys

    code = (
        "from jax2onnx_myops import ops\n"
        "import jax2onnx\n"
        "assert 'myops' in [p.name for p in jax2onnx.plugins().plugins]\n"
    )
    subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], check=True)
