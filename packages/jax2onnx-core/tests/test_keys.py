"""Key arrays (extended dtypes) are stored as their uint32 key data."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from jax import export

from jax2onnx import to_onnx
from jax2onnx.values.keys import is_extended, on_key_data, physical

_KEY_DTYPE = jax.eval_shape(lambda: jax.random.key(0)).dtype


def _run(model, *feeds):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session, session.run(None, {n: np.asarray(f) for n, f in zip(names, feeds)})


def _data(x):
    return np.asarray(jax.random.key_data(x)) if is_extended(x.dtype) else np.asarray(x)


def test_physical_maps_keys_to_uint32_key_data():
    assert physical(_KEY_DTYPE, (3,)) == (np.dtype(np.uint32), (3, 2))
    assert physical(np.dtype(np.float32), [2]) == (np.dtype(np.float32), (2,))
    assert not is_extended(None) and not is_extended(jnp.bfloat16)


def test_key_graph_inputs_and_outputs_carry_key_data():
    def fn(key, x):
        a, b = jax.random.split(key)
        return a, x + jax.random.normal(b, x.shape)

    batch = export.symbolic_shape("B")[0]
    model = to_onnx(
        fn, [jax.ShapeDtypeStruct((), _KEY_DTYPE), jax.ShapeDtypeStruct((batch,), np.float32)]
    )
    key, x = jax.random.key(5), np.arange(4, dtype=np.float32)
    session, got = _run(model, _data(key), x)
    assert [(i.type, i.shape) for i in session.get_inputs()] == [
        ("tensor(uint32)", [2]),
        ("tensor(float)", ["B"]),
    ]
    assert session.get_outputs()[0].type == "tensor(uint32)"
    want = fn(key, x)
    np.testing.assert_array_equal(got[0], _data(want[0]))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_closed_over_key_becomes_its_key_data():
    key = jax.random.key(11)
    model = to_onnx(lambda: jax.random.bits(key, (3,)), [])
    _, (got,) = _run(model)
    np.testing.assert_array_equal(got, jax.random.bits(key, (3,)))


@pytest.mark.parametrize(
    "name, fn, extra",
    [
        ("reshape_transpose", lambda ks: ks.reshape(2, 3).T, []),
        ("rev", lambda ks: ks[::-1], []),
        ("broadcast", lambda ks: jnp.broadcast_to(ks[:1], (2, 6)), []),
        ("concatenate", lambda ks: jnp.concatenate([ks, ks[2:4]]), []),
        ("gather", lambda ks, i: ks[i], [np.array([5, 0, 3], np.int32)]),
        ("dynamic_slice", lambda ks, i: ks[i], [np.int32(4)]),
        ("select", lambda ks, c: jnp.where(c, ks, ks[0]), [np.arange(6) % 2 == 0]),
    ],
)
def test_layout_ops_on_keys_run_on_key_data(name, fn, extra):
    keys = jax.random.split(jax.random.key(2), 6)
    model = to_onnx(fn, [keys, *extra])
    _, (got,) = _run(model, _data(keys), *extra)
    np.testing.assert_array_equal(got, _data(fn(keys, *extra)))


def test_on_key_data_only_for_layout_equations_on_keys():
    keys = jax.random.split(jax.random.key(2), 6)
    eqns = jax.make_jaxpr(
        lambda ks, x: (ks.reshape(2, 3), x.reshape(2, 3), jax.random.bits(ks[0]))
    )(keys, np.zeros(6, np.float32)).eqns
    by_name = {e.primitive.name: e for e in eqns}
    fn, specs = on_key_data(eqns[0])
    closed = jax.make_jaxpr(fn)(*specs)
    assert closed.in_avals[0].shape == (6, 2)
    assert closed.out_avals[0].shape == (2, 3, 2) and closed.out_avals[0].dtype == np.uint32
    assert on_key_data(eqns[1]) is None  # no key array
    assert on_key_data(by_name["random_bits"]) is None  # a key primitive: its own rule


def test_allclose_feeds_a_key_input_as_its_key_data(tmp_path):
    from jax2onnx import allclose

    def noisy(key, x):
        return jax.random.split(key)[0], x + jax.random.normal(key, x.shape)

    key = jax.random.key(3)
    path = tmp_path / "noisy.onnx"
    to_onnx(noisy, [key, (2, 3)], return_mode="file", output_path=path)
    ok, message = allclose(noisy, path, [key, np.ones((2, 3), np.float32)])
    assert ok, message
    other = jax.random.key(4)  # a different key gives different noise in JAX, the same model
    ok, _ = allclose(lambda k, x: noisy(key, x), path, [other, np.ones((2, 3), np.float32)])
    assert not ok
