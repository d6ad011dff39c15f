"""Symbolic dimension expressions computed in the graph (``jax2onnx.values.dims``), at
several sizes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx.values.errors import LoweringError


def _sizes(fn, spec, lengths):
    """The output length ONNX Runtime gives for each input length, and JAX's."""
    model = to_onnx(fn, [spec])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got, want = [], []
    for n in lengths:
        x = np.arange(n, dtype=np.float32)
        got.append(session.run(None, {"in_0": x})[0].shape[0])
        want.append(fn(x).shape[0])
    return got, want, [n.op_type for n in model.graph.node]


@pytest.mark.parametrize(
    "name, size",
    [
        ("ceiling", lambda n: -(-n // 3)),
        ("floor of a negative", lambda n: (2 - n) // 3 + n),
        ("mod of a negative", lambda n: (1 - n) % 4 + 1),
    ],
)
def test_arithmetic_has_jax_meaning_at_every_size(name, size):
    def fn(x):
        return jnp.zeros((size(x.shape[0]),)) + jnp.sum(x)

    got, want, _ = _sizes(fn, ("B",), range(1, 10))
    assert got == want, name


def test_min_of_a_dimension_and_a_constant():
    got, want, ops = _sizes(lambda x: x[:4], ("B",), [1, 3, 4, 6])
    assert got == want == [1, 3, 4, 4]
    assert ops == ["Shape", "Min", "Slice"]


def test_variables_solved_from_expression_sizes():
    def fn(x):
        half = x.shape[0] // 2
        return x[:half] + jnp.arange(half, dtype=x.dtype)

    got, want, _ = _sizes(fn, ("2*b",), [2, 6, 10])
    assert got == want == [1, 3, 5]
    got, want, _ = _sizes(lambda x: x[3:] * jnp.ones(x.shape[0] - 3), ("b + 3",), [4, 9])
    assert got == want == [1, 6]


def test_an_expression_that_is_an_input_size_is_read_from_it():
    got, want, ops = _sizes(lambda x: jnp.ones(x.shape[0]) * jnp.sum(x), ("b*b",), [1, 4, 9])
    assert got == want == [1, 4, 9]
    assert ops[:2] == ["Shape", "Expand"]  # b*b read from the input, not computed from b


def test_a_variable_the_input_sizes_do_not_determine_is_refused_naming_it():
    def fn(x):
        (b,) = jax.export.symbolic_shape("b", scope=x.shape[0].scope)
        return jnp.zeros((b,)) + jnp.sum(x)

    with pytest.raises(LoweringError, match=r"'b'.*do not determine it.*2\*b, b \+ 1"):
        to_onnx(fn, [("b*b",)])


def test_an_undecidable_comparison_names_the_line_and_the_constraint_that_decides_it():
    table = jnp.ones((1, 64, 4))

    def add_positions(x):
        return x + table[:, : x.shape[1]]  # T rows or min(64, T)?

    with pytest.raises(ValueError) as info:
        to_onnx(add_positions, [("B", "T", 4)])
    message = str(info.value)
    assert "cannot decide a comparison of symbolic dimensions" in message
    assert f"{__file__}:" in message and "(add_positions)" in message
    assert "constraints=['T <= 64']" in message

    spec = jax.export.symbolic_shape("B, T", constraints=["T <= 64"])
    model = to_onnx(add_positions, [jax.ShapeDtypeStruct((*spec, 4), jnp.float32)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for t in (1, 64):
        x = np.zeros((2, t, 4), np.float32)
        np.testing.assert_allclose(session.run(None, {"in_0": x})[0], add_positions(x))


def test_python_arithmetic_on_a_symbolic_size_names_the_line():
    def smooth(x):
        return jnp.convolve(x, jnp.ones(3), mode="same")  # NumPy-sized arrays of len(x)

    with pytest.raises(ValueError) as info:
        to_onnx(smooth, [("T",)])
    message = str(info.value)
    assert "needs the concrete value of a symbolic dimension" in message
    assert f"{__file__}:" in message and "give that axis a static size" in message


def test_a_ceiling_of_a_size_is_one_add_and_one_div():
    def first_half_rounded_up(x):
        return x[:, : -(-(x.shape[1] + 1) // 3)]  # ceil((T + 1) / 3)

    model = to_onnx(first_half_rounded_up, [("B", "T")])
    assert [n.op_type for n in model.graph.node] == ["Shape", "Add", "Div", "Slice"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for t in range(1, 8):
        x = np.arange(2 * t, dtype=np.float32).reshape(2, t)
        np.testing.assert_array_equal(session.run(None, {"in_0": x})[0], first_half_rounded_up(x))
