"""Older opsets: a rule emits today's ONNX forms; the core writes them for opsets 13..26.

Each rule here emits one modern form (``ReduceMax`` with an axes input,
``Split(num_outputs=)``, ``Shape(start=)``, ``Add`` on int8 ...). At every
opset the model must pass the full checker, use only forms that opset has,
and compute what JAX computes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx.plugin import Rules

OPSETS = [13, 14, 15, 16, 17, 18, 23]


def _thirds(x):
    """ONNX's Split(num_outputs=3): chunks of ceil(n / 3), the last one smaller."""
    c = -(-x.shape[1] // 3)
    return x[:, :c], x[:, c : 2 * c], x[:, 2 * c :]


def _rules():
    rules = Rules("opset_forms")

    reduce_p = rules.primitive("forms.reduce_max", impl=lambda x: jnp.max(x, axis=(0, 2)))

    @rules.lowering(reduce_p)
    def _reduce(ctx, x):
        return ctx.op.ReduceMax(x, ctx.i64([0, 2]), keepdims=0)

    split_p = rules.primitive(
        "forms.split",
        impl=_thirds,
        multiple_results=True,
    )

    @rules.lowering(split_p)
    def _split(ctx, x):
        return list(ctx.op.Split(x, axis=1, num_outputs=3, _outputs=3))

    size_p = rules.primitive("forms.size", impl=lambda x: jnp.asarray(x.shape[1:], jnp.int32))

    @rules.lowering(size_p)
    def _size(ctx, x):
        return ctx.cast(ctx.op.Shape(x, start=1), np.int32)

    add_p = rules.primitive(
        "forms.add", impl=lambda a, b: a * b + a - jax.lax.div(b, jnp.asarray(3, b.dtype))
    )

    @rules.lowering(add_p)
    def _add(ctx, a, b):
        return ctx.op.Sub(
            ctx.op.Add(ctx.op.Mul(a, b), a), ctx.op.Div(b, np.asarray(3, b.dtype.numpy()))
        )

    inf_p = rules.primitive("forms.isinf", impl=jnp.isinf)

    @rules.lowering(inf_p)
    def _isinf(ctx, x):
        return ctx.op.IsInf(x)

    norm_p = rules.primitive(
        "forms.layer_norm",
        impl=lambda x, s, b: (
            (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * s + b
        ),
    )

    @rules.lowering(norm_p)
    def _norm(ctx, x, s, b):
        return ctx.op.LayerNormalization(x, s, b, axis=-1, epsilon=1e-5)

    swap_p = rules.primitive(
        "forms.swap_sizes", impl=lambda x: x.reshape(x.shape[1], x.shape[0], *x.shape[2:])
    )

    @rules.lowering(swap_p)
    def _swap(ctx, x):
        return ctx.reshape(x, ctx.avals_out[0].shape)  # allowzero=1 for the symbolic sizes

    rules.freeze()
    return rules, reduce_p, split_p, size_p, add_p, inf_p, norm_p, swap_p


RULES, REDUCE, SPLIT, SIZE, ADD, ISINF, NORM, SWAP = _rules()
F32 = np.float32


def _spec(shape, dtype=F32):
    return jax.ShapeDtypeStruct(shape, dtype)


CASES = {
    "reduce_axes_input": (
        lambda x: REDUCE.bind(x),
        [(2, 3, 4)],
        [np.random.default_rng(0).standard_normal((2, 3, 4)).astype(F32)],
    ),
    "split_num_outputs_static": (
        lambda x: SPLIT.bind(x),
        [(2, 7)],
        [np.arange(14, dtype=F32).reshape(2, 7)],
    ),
    "shape_start": (
        lambda x: SIZE.bind(x),
        [("B", 5, 6)],
        [np.zeros((2, 5, 6), F32)],
    ),
    "int8_arithmetic": (
        lambda a, b: ADD.bind(a, b),
        [_spec((6,), np.int8), _spec((6,), np.int8)],
        [
            np.array([127, -128, 100, -7, 0, 5], np.int8),
            np.array([2, 3, 100, 9, -128, -5], np.int8),
        ],
    ),
    "uint16_arithmetic": (
        lambda a, b: ADD.bind(a, b),
        [_spec((4,), np.uint16), _spec((4,), np.uint16)],
        [np.array([65535, 300, 0, 7], np.uint16), np.array([65535, 300, 5, 2], np.uint16)],
    ),
    "isinf_float16": (
        lambda x: ISINF.bind(x),
        [_spec((4,), np.float16)],
        [np.array([np.inf, -np.inf, np.nan, 65504], np.float16)],
    ),
    "layer_norm": (
        lambda x, s, b: NORM.bind(x, s, b),
        [("B", 8), (8,), (8,)],
        [np.random.default_rng(1).standard_normal(s).astype(F32) for s in ((3, 8), (8,), (8,))],
    ),
}


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_modern_forms_work_at_every_opset(name, opset):
    fn, specs, args = CASES[name]
    model = to_onnx(fn, specs, opset=opset, extra_rules=RULES)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(session.get_inputs(), args)}
    got = session.run(None, feed)
    want = jax.tree_util.tree_leaves(fn(*args))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-5)


def test_split_of_a_symbolic_axis_at_opset_13():
    model = to_onnx(lambda x: SPLIT.bind(x), [(2, "N")], opset=13, extra_rules=RULES)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (3, 7, 8):
        x = np.arange(2 * n, dtype=F32).reshape(2, n)
        got = session.run(None, {session.get_inputs()[0].name: x})
        for g, w in zip(got, _thirds(x), strict=True):
            np.testing.assert_array_equal(g, w)


def test_forms_are_rewritten_only_below_their_opset():
    model13 = to_onnx(lambda x: REDUCE.bind(x), [(2, 3, 4)], opset=13, extra_rules=RULES)
    (node,) = model13.graph.node
    assert len(node.input) == 1 and sorted(a.name for a in node.attribute) == ["axes", "keepdims"]
    model18 = to_onnx(lambda x: REDUCE.bind(x), [(2, 3, 4)], opset=18, extra_rules=RULES)
    (node,) = model18.graph.node
    assert len(node.input) == 2
    norm16 = to_onnx(lambda *a: NORM.bind(*a), [(2, 8), (8,), (8,)], opset=16, extra_rules=RULES)
    assert "LayerNormalization" not in [n.op_type for n in norm16.graph.node]
    norm17 = to_onnx(lambda *a: NORM.bind(*a), [(2, 8), (8,), (8,)], opset=17, extra_rules=RULES)
    assert [n.op_type for n in norm17.graph.node] == ["LayerNormalization"]


@pytest.mark.parametrize("opset", [13, 14, 23])
@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.float16])
def test_a_reshape_to_run_time_sizes_keeps_a_zero_size(opset, dtype):
    # a 0 in a computed target is a size (allowzero=1), not ONNX's "copy the input's axis";
    # opset 13 has no allowzero: the Reshape is rewritten
    spec = [_spec(("B", "T", 0), dtype)]
    model = to_onnx(lambda x: SWAP.bind(x), spec, opset=opset, extra_rules=RULES)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((2, 0, 0), (0, 3, 0)):
        x = np.zeros(shape, dtype)
        (got,) = session.run(None, {session.get_inputs()[0].name: x})
        assert got.shape == (shape[1], shape[0], 0)
    spec = [_spec(("B", "T"), dtype)]
    model = to_onnx(lambda x: SWAP.bind(x), spec, opset=opset, extra_rules=RULES)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((2, 0), (0, 3), (2, 3)):
        x = np.arange(np.prod(shape)).astype(dtype).reshape(shape)
        (got,) = session.run(None, {session.get_inputs()[0].name: x})
        np.testing.assert_array_equal(got, x.reshape(shape[1], shape[0]))


@pytest.mark.parametrize(("dtype", "since"), [(jnp.float8_e4m3fn, 19), (jnp.int4, 21)])
def test_a_type_newer_than_the_opset_is_refused_at_the_users_line(dtype, since):
    from jax2onnx.plugin import LoweringError

    with pytest.raises(LoweringError, match=rf"test_opsets.py.*opset={since} or newer"):
        to_onnx(lambda x: x.astype(dtype).astype(jnp.float32), [(3,)], opset=since - 1)
    to_onnx(lambda x: x.astype(dtype).astype(jnp.float32), [(3,)], opset=since)
