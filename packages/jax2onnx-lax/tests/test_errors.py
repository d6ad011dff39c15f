"""Lowerings that cannot express an input say so, naming the primitive and the user's line."""

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx import to_onnx
from jax2onnx.errors import LoweringError


def test_reduce_window_with_an_unsupported_reducer_names_the_body():
    def f(x):
        return lax.reduce_window(x, 0.0, lambda a, b: a + 2 * b, (2,), (1,), "VALID")

    with pytest.raises(LoweringError, match=r"reduce_window at .*test_errors.py.*reducer"):
        to_onnx(f, [(4,)])


def test_cumulative_max_over_a_symbolic_axis_is_refused_clearly():
    with pytest.raises(LoweringError, match=r"cummax at .*test_errors.py"):
        to_onnx(lambda x: lax.cummax(x, axis=0), [("T", 3)])


def test_nextafter_needs_opset_26():
    with pytest.raises(LoweringError, match="opset=26"):
        to_onnx(lambda x, y: jnp.nextafter(x, y), [np.zeros(3, np.float32)] * 2)


def test_float_bitcast_below_opset_26_names_the_opset():
    with pytest.raises(LoweringError, match="opset=26"):
        to_onnx(lambda x: lax.bitcast_convert_type(x, np.int32), [(3,)], opset=23)
