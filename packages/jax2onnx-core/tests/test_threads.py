"""Interceptions are visible only to the conversion that installed them, under threads too."""

from __future__ import annotations

import threading

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

import jax2onnx
from jax2onnx.registration.interceptions import BOARD, resolve


def _intercepted_attributes() -> dict[str, object]:
    """Every attribute some loaded plugin intercepts (targets and aliases), as it is now."""
    found = {}
    for item in jax2onnx.plugins().registry().interceptions:
        for target in (item.target, *item.aliases):
            owner_attr = resolve(target, load=False)
            if owner_attr is not None and hasattr(*owner_attr):
                found[target] = getattr(*owner_attr)
    return found


def _model(x):
    y = jax.nn.gelu(x) + jax.nn.relu(x) * jax.nn.softmax(x, axis=-1)
    return jnp.clip(y, -1.0, 1.0) + jnp.linspace(0.0, 1.0, x.shape[-1])


def _failing(x):
    raise ValueError("the user's own error")


def _interrupted(x):
    jax.nn.gelu(x)
    raise KeyboardInterrupt


def _plain_primitives(fn, *args) -> set[str]:
    closed = jax.make_jaxpr(fn)(*args)
    names = set()
    stack = [closed.jaxpr]
    while stack:
        jaxpr = stack.pop()
        for eqn in jaxpr.eqns:
            names.add(eqn.primitive.name)
            stack.extend(
                j.jaxpr if hasattr(j, "jaxpr") else j
                for j in jax.extend.core.jaxprs_in_params(eqn.params)
            )
    return names


def test_concurrent_conversions_leave_plain_jax_alone():
    jax2onnx.plugins()
    originals = _intercepted_attributes()
    assert {"jax.nn.gelu", "jax.nn.relu", "jax.nn.softmax", "jax.numpy.clip"} <= set(originals)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    plain = {
        "gelu": (jax.nn.gelu, _plain_primitives(jax.nn.gelu, x)),
        "softmax": (jax.nn.softmax, _plain_primitives(jax.nn.softmax, x)),
        "clip": (
            lambda v: jnp.clip(v, -1.0, 1.0),
            _plain_primitives(lambda v: jnp.clip(v, -1.0, 1.0), x),
        ),
    }
    assert not any(name.startswith("nn.") for _, names in plain.values() for name in names)
    errors: list[str] = []
    start = threading.Barrier(10)

    def convert(worker: int) -> None:
        start.wait()
        for round_ in range(4):
            kind = (worker + round_) % 4
            try:
                if kind == 0:
                    model = jax2onnx.to_onnx(_failing, [(3, 4)])
                elif kind == 1:
                    model = jax2onnx.to_onnx(_interrupted, [(3, 4)])
                else:
                    model = jax2onnx.to_onnx(_model, [("B", 4)])
                    ops = {n.op_type for n in model.graph.node}
                    if not {"Gelu", "Relu", "Softmax"} <= ops:
                        errors.append(f"worker {worker}: conversion lost its interceptions: {ops}")
            except ValueError as err:
                if kind != 0 or "the user's own error" not in str(err):
                    errors.append(f"worker {worker}: {err!r}")
            except KeyboardInterrupt:
                if kind != 1:
                    errors.append(f"worker {worker}: unexpected KeyboardInterrupt")

    def trace_plainly(worker: int) -> None:
        start.wait()
        for _ in range(30):
            for name, (fn, expected) in plain.items():
                got = _plain_primitives(fn, x)
                if got != expected:
                    errors.append(f"plain {name} in thread {worker} traced {sorted(got)}")

    threads = [threading.Thread(target=convert, args=(i,)) for i in range(8)]
    threads += [threading.Thread(target=trace_plainly, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, "\n".join(errors[:10])
    after = _intercepted_attributes()
    changed = [target for target, value in originals.items() if after[target] is not value]
    assert not changed, f"still patched after every conversion returned: {changed}"
    assert BOARD.patched() == []


def test_a_conversion_in_progress_does_not_change_plain_tracing_elsewhere():
    x = np.ones((2, 3), np.float32)
    inside = threading.Event()
    release = threading.Event()
    seen = {}

    def slow_model(v):
        inside.set()
        release.wait(timeout=30)
        return jax.nn.gelu(v)

    worker = threading.Thread(
        target=lambda: seen.setdefault("model", jax2onnx.to_onnx(slow_model, [(2, 3)]))
    )
    worker.start()
    assert inside.wait(timeout=30)
    try:
        assert BOARD.patched()  # the conversion's dispatchers are installed now ...
        names = _plain_primitives(jax.nn.gelu, x)  # ... and plain JAX here does not see them
        assert not any(name.startswith("nn.") for name in names)
        np.testing.assert_allclose(jax.nn.gelu(x), jax.nn.gelu(jnp.asarray(x)))
    finally:
        release.set()
        worker.join()
    assert [n.op_type for n in seen["model"].graph.node] == ["Gelu"]
    assert BOARD.patched() == []


def test_restoring_keeps_an_attribute_the_user_assigned_meanwhile():
    import types

    module = types.ModuleType("j2o_thread_demo")
    module.fn = lambda v: v + 1
    from jax2onnx.registration.interceptions import _MISSING

    acquired = []
    with BOARD.locked():
        slot = BOARD.acquire(module, "fn", acquired)
    assert module.fn is slot.dispatcher and slot.own is not _MISSING
    replacement = lambda v: v * 3  # noqa: E731
    module.fn = replacement
    with BOARD.locked():
        BOARD.release(slot)
    assert module.fn is replacement


@pytest.mark.parametrize("error", [ValueError("boom"), KeyboardInterrupt()])
def test_an_interrupted_conversion_restores_every_attribute(error):
    originals = _intercepted_attributes()

    def breaks(v):
        jax.nn.relu(v)
        raise error

    with pytest.raises(type(error)):
        jax2onnx.to_onnx(breaks, [(3,)])
    after = _intercepted_attributes()
    assert all(after[t] is v for t, v in originals.items())


def test_jax_caches_keep_converter_and_user_traces_apart():
    x = np.ones((3,), np.float32)
    converted_first = jax.jit(lambda v: jax.nn.gelu(v) * 2.0)
    assert [n.op_type for n in jax2onnx.to_onnx(converted_first, [(3,)]).graph.node] == [
        "Gelu",
        "Mul",
    ]
    assert "nn.gelu" not in _plain_primitives(converted_first, x)  # the user's trace is JAX's

    traced_first = jax.jit(lambda v: jax.nn.gelu(v) * 2.0)
    assert "nn.gelu" not in _plain_primitives(traced_first, x)
    model = jax2onnx.to_onnx(traced_first, [(3,)])  # not the user's cached trace
    assert [n.op_type for n in model.graph.node] == ["Gelu", "Mul"]
