"""Data-dependent output sizes (``jax2onnx_lax.dynamic``): names, refusals, JAX's caches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest

import jax2onnx


def _dims(model):
    return [
        [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
        for o in model.graph.output
    ]


def _run(model, *inputs):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def test_each_call_gets_its_own_named_dimension():
    def fn(x, n):
        return (
            jnp.nonzero(x > 0)[0],
            x[x < 0],
            jnp.unique(jnp.round(x)),
            jnp.compress(x > 1, x),
            jnp.arange(n),
        )

    model = jax2onnx.to_onnx(fn, [("B",), ()])
    assert _dims(model) == [
        ["nonzero_0"],
        ["nonzero_1"],
        ["unique_0"],
        ["compress_0"],
        ["arange_0"],
    ]
    x = np.array([2.0, -1.0, 0.0, 3.0, -0.5], np.float32)
    got = _run(model, x, np.array(3, np.float32))
    want = [np.asarray(w) for w in fn(x, np.float32(3))]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("jnp.nonzero", lambda x: jnp.nonzero(x > 0)[0]),
        ("x[mask]", lambda x: x[x > 0]),
        ("jnp.unique", lambda x: jnp.unique(x)),
        ("jnp.compress", lambda x: jnp.compress(x > 0, x)),
    ],
)
def test_vmap_of_a_data_dependent_size_names_the_function_and_size(name, fn):
    with pytest.raises(ValueError, match=r"(?s)jax\.vmap.*ragged.*size="):
        jax2onnx.to_onnx(jax.vmap(lambda x: fn(x)), [("B", 4)])


def test_vmap_of_a_traced_arange_length_is_refused_clearly():
    with pytest.raises(ValueError, match="jnp.arange with a traced length inside jax.vmap"):
        jax2onnx.to_onnx(jax.vmap(lambda n: jnp.arange(n)), [("B",)])


@pytest.mark.parametrize(
    ("fn", "spec", "what"),
    [
        (lambda x: jnp.unique(x, axis=0), jax.ShapeDtypeStruct((2, 0), np.int32), "empty slices"),
        (lambda x: jnp.unique(x, axis=0, equal_nan=False), (3, 2), "equal_nan=False"),
    ],
)
def test_unique_forms_that_do_not_convert_say_so_and_suggest_size(fn, spec, what):
    with pytest.raises(NotImplementedError, match=rf"(?s){what}.*size="):
        jax2onnx.to_onnx(fn, [spec])


def test_a_cached_jit_trace_never_mixes_two_conversions_dimensions():
    selected = jax.jit(lambda x: x[x > 0])
    jax2onnx.to_onnx(selected, [(5,)])  # caches a trace holding this conversion's nonzero_0
    model = jax2onnx.to_onnx(lambda x: (selected(x), jnp.nonzero(x < 0)[0]), [(5,)])
    assert _dims(model) == [["nonzero_0"], ["nonzero_1"]]
    x = np.array([1.0, -2.0, 3.0, -4.0, 5.0], np.float32)
    positive, negative_at = _run(model, x)
    np.testing.assert_array_equal(positive, [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(negative_at, [1, 3])


def test_calls_jax_traces_itself_keep_jax_path():
    model = jax2onnx.to_onnx(
        lambda x, y: (
            jnp.nonzero(x > 0, size=2)[0],
            jnp.arange(x.shape[0]),
            y[np.arange(3) > 0],
        ),
        [("B",), (3,)],
    )
    assert "NonZero" not in {n.op_type for n in model.graph.node}
    assert _dims(model) == [[2], ["B"], [2]]
    unique = jax2onnx.to_onnx(lambda x: jnp.unique(x, size=2, fill_value=0.0), [(5,)])
    assert "Unique" not in {n.op_type for n in unique.graph.node}
    assert _dims(unique) == [[2]]


def test_a_jitted_function_called_twice_gets_a_size_per_call():
    selected = jax.jit(lambda x: x[x > 0])
    model = jax2onnx.to_onnx(lambda a, b: (selected(a), selected(b)), [(5,), (5,)])
    assert _dims(model) == [["nonzero_0"], ["nonzero_1"]]
    a = np.array([1.0, -2.0, 3.0, -4.0, 5.0], np.float32)
    got = _run(model, a, -a)
    np.testing.assert_array_equal(got[0], [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(got[1], [2.0, 4.0])


def test_same_strided_conv_on_symbolic_sizes_is_one_conv_with_same_upper():
    w = np.ones((3, 3, 2, 4), np.float32)

    def fn(x):
        return jax.lax.conv_general_dilated(
            x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    model = jax2onnx.to_onnx(fn, [("B", "H", "W", 2)])
    (conv,) = [n for n in model.graph.node if n.op_type == "Conv"]
    assert {a.name: a.s for a in conv.attribute if a.name == "auto_pad"} == {
        "auto_pad": b"SAME_UPPER"
    }
    assert "Pad" not in [n.op_type for n in model.graph.node]
    for h, w_ in [(5, 8), (8, 3)]:
        x = np.random.default_rng(h).standard_normal((2, h, w_, 2)).astype(np.float32)
        (got,) = _run(model, x)
        np.testing.assert_allclose(got, fn(x), rtol=1e-5, atol=1e-5)


def test_a_symbolic_group_count_is_a_matmul_over_shifted_slices():
    """Per-sample kernels under vmap fold the batch into the groups: Conv's `group` is static."""

    def one(image, k):
        y = jax.lax.conv_general_dilated(
            image[None],
            k,
            (1, 1),
            "SAME",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=2,
        )
        return y[0]

    fn = jax.vmap(one)
    model = jax2onnx.to_onnx(fn, [("B", 4, 5, 2), ("B", 3, 3, 1, 2)])
    ops = [n.op_type for n in model.graph.node]
    assert "Conv" not in ops and ops.count("MatMul") == 1
    static = jax2onnx.to_onnx(fn, [(3, 4, 5, 2), (3, 3, 3, 1, 2)])
    assert [n.op_type for n in static.graph.node].count("Conv") == 1
