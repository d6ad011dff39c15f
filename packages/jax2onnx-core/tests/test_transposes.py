"""Layout changes sink through layout-agnostic ops (FoldTransposesPass).

Every test compares with JAX in ONNX Runtime as well as counting Transposes.
"""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from jax import lax

from jax2onnx import to_onnx

RNG = np.random.default_rng(0)


def _array(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _run(model, fn, *xs, tol=1e-5):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, dict(zip(names, xs)))
    want = jax.tree_util.tree_leaves(fn(*xs))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=tol, atol=tol)


def _conv(x, w, stride=1, groups=1):
    return lax.conv_general_dilated(
        x,
        w,
        (stride, stride),
        "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups,
    )


W1, W2, W3, WP = _array(3, 3, 3, 8), _array(3, 3, 8, 8), _array(3, 3, 8, 16), _array(1, 1, 8, 16)
WD, HEAD = _array(3, 3, 1, 32), _array(32, 4)
BNS = {c: (_array(c), 1 + np.abs(_array(c)), _array(c), _array(c)) for c in (8, 16)}


def _norm(x):
    mean, var, scale, offset = BNS[x.shape[-1]]
    return (x - mean) * (scale * lax.rsqrt(var + 1e-5)) + offset


def nhwc_cnn(x):
    """Haiku-style: BatchNorm arithmetic, max pool, residual adds (one projected), swish,
    padding, concatenation, a depthwise convolution and a global mean."""
    x = jax.nn.relu(_norm(_conv(x, W1, 2)))
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    y = _norm(_conv(jax.nn.relu(_norm(_conv(x, W2))), W2))
    x = jax.nn.relu(x + y)
    y = _norm(_conv(x, W3, 2))
    x = jax.nn.swish(_norm(_conv(x, WP, 2)) + y)
    x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    x = jnp.concatenate([x, jnp.abs(x)], axis=-1)
    x = jax.nn.relu6(_conv(x, WD, groups=32))
    return jnp.mean(x, axis=(1, 2)) @ HEAD


def test_channels_last_cnn_keeps_only_the_input_transpose():
    model = to_onnx(nhwc_cnn, [("B", 16, 16, 3)])
    ops = _ops(model)
    assert ops.count("Transpose") == 1 and ops[0] == "Transpose", ops
    assert ops.count("Conv") == 6
    _run(model, nhwc_cnn, _array(2, 16, 16, 3), tol=1e-4)  # six float32 convolutions deep


def test_channels_first_input_leaves_no_transpose():
    model = to_onnx(nhwc_cnn, [("B", 16, 16, 3)], inputs_as_nchw=[0])
    assert "Transpose" not in _ops(model)
    x = _array(2, 16, 16, 3)
    _run(
        model,
        lambda x: nhwc_cnn(np.transpose(x, (0, 2, 3, 1))),
        np.transpose(x, (0, 3, 1, 2)),
        tol=1e-4,
    )


def test_channels_last_output_transposed_once():
    def fn(x):
        return jax.nn.relu(_norm(_conv(x, W1)))

    model = to_onnx(fn, [("B", 8, 8, 3)])
    assert _ops(model).count("Transpose") == 2  # in, and back to NHWC at the output
    _run(model, fn, _array(2, 8, 8, 3))
    model = to_onnx(fn, [("B", 8, 8, 3)], inputs_as_nchw=[0], outputs_as_nchw=[0])
    assert "Transpose" not in _ops(model)


def test_swish_on_a_transposed_value_with_two_uses():
    c = _array(4)

    def fn(x):
        y = jnp.transpose(x, (0, 2, 1)) * c
        return jnp.transpose(jax.nn.sigmoid(y) * y, (0, 2, 1))

    model = to_onnx(fn, [("B", 4, 5)])
    assert "Transpose" not in _ops(model)
    _run(model, fn, _array(3, 4, 5))


@pytest.mark.parametrize("opset", [13, 23])  # ReduceMax's axes: an attribute, an input
def test_reductions_follow_the_axes(opset):
    t = lambda v: jnp.transpose(v, (2, 0, 1))

    def fn(a, b, c, d):
        x = t(a) + t(b) * t(c) - t(d)
        # (5, 3): the kept axes come out swapped; (5, 1, 3): also, then a new axis
        return jnp.sum(x, axis=1), jnp.max(x, axis=1, keepdims=True)

    model = to_onnx(fn, [(3, 4, 5)] * 4, opset=opset)
    ops = _ops(model)  # four Transposes of the inputs become two of the reduced results
    assert ops.count("Transpose") == 2 and ops.index("Transpose") > ops.index("ReduceSum")
    _run(model, fn, *(_array(3, 4, 5) for _ in range(4)))


def test_softmax_slice_and_concat_follow_the_axes():
    def fn(x):
        t = jnp.transpose(x, (0, 2, 1))
        s = jax.nn.softmax(t, axis=-1)
        s = jnp.concatenate([s[:, 1:3], jnp.ones((1, 1, 4), np.float32) + s[:, :1]], axis=1)
        return jnp.transpose(s, (0, 2, 1))

    model = to_onnx(fn, [(2, 4, 5)])
    assert "Transpose" not in _ops(model)
    _run(model, fn, _array(2, 4, 5))


def test_transpose_stays_when_moving_it_would_not_remove_one():
    other = lambda x, y: jnp.transpose(x, (1, 0)) * y  # y is computed, not a constant
    model = to_onnx(other, [(3, 4), (4, 3)])
    assert _ops(model) == ["Transpose", "Mul"]
    _run(model, other, _array(3, 4), _array(4, 3))
    used_twice = lambda x: (jnp.transpose(x, (1, 0)), jnp.tanh(jnp.transpose(x, (1, 0))))
    model = to_onnx(used_twice, [(3, 4)])
    assert _ops(model).count("Transpose") == 1
    _run(model, used_twice, _array(3, 4))


def test_values_read_inside_a_subgraph_keep_their_layout():
    c = _array(3)

    def fn(x, flag):
        t = jnp.transpose(x, (1, 0)) * c
        r = lax.cond(flag > 0, lambda: jnp.tanh(t), lambda: t * 2.0)
        return jnp.transpose(jax.nn.relu(t), (1, 0)), r  # the Transposes around relu cancel

    model = to_onnx(fn, [(3, 4), jax.ShapeDtypeStruct((), np.int32)])
    ops = _ops(model)  # the branches read t as JAX computes it: transposed back for them
    assert "If" in ops and ops.count("Transpose") == 1 and ops.index("Transpose") > 0
    for flag in (np.array(1, np.int32), np.array(-1, np.int32)):
        _run(model, fn, _array(3, 4), flag)


def test_split_follows_the_axes():
    def fn(x):
        a, b = jnp.split(jnp.transpose(x, (0, 2, 1)), 2, axis=1)
        return jnp.transpose(jnp.concatenate([jax.nn.relu(a), b * 2.0], axis=1), (0, 2, 1))

    model = to_onnx(fn, [("B", 4, 6)])
    assert "Split" in _ops(model) and "Transpose" not in _ops(model)
    _run(model, fn, _array(2, 4, 6))


def test_a_value_read_both_transposed_back_and_as_it_is():
    w = _array(3, 2)

    def fn(a, b):
        u = jnp.abs(a.T + b.T)
        return jnp.tanh(u.T), u @ w  # u.T cancels; the MatMul still needs u transposed

    model = to_onnx(fn, [(3, 4), (3, 4)])
    assert _ops(model).count("Transpose") == 1
    _run(model, fn, _array(3, 4), _array(3, 4))
