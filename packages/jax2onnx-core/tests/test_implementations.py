"""Primitives no plugin lowers convert through their own JAX implementation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import Primitive

from jax2onnx import allclose, convert, to_onnx
from jax2onnx.plugin import LoweringError, UnsupportedPrimitiveError


def _primitive(name, impl, multiple_results=False):
    prim = Primitive(name)
    prim.multiple_results = multiple_results
    prim.def_impl(impl)
    if multiple_results:
        prim.def_abstract_eval(lambda x: [jax.core.ShapedArray(x.shape, x.dtype)] * 2)
    else:
        prim.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
    return prim


softsign_p = _primitive("test_softsign", lambda x: x / (1 + jnp.abs(x)))
split_p = _primitive("test_split_signs", lambda x: [jnp.maximum(x, 0), jnp.minimum(x, 0)], True)


def test_an_implementation_is_inlined_and_matches(tmp_path):
    def f(x):
        pos, neg = split_p.bind(x)
        return softsign_p.bind(x) + pos * neg

    result = convert(f, [("B", 3)])
    assert result.report.inlined == {"test_softsign", "test_split_signs"}
    path = to_onnx(f, [("B", 3)], return_mode="file", output_path=tmp_path / "m.onnx")
    ok, message = allclose(f, path, [np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)])
    assert ok, message


def test_what_an_implementation_binds_must_convert_and_is_reported_there():
    def host(x):
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    calls_host_p = _primitive("test_calls_host", host)
    with pytest.raises(UnsupportedPrimitiveError) as err:
        to_onnx(lambda x: calls_host_p.bind(x) * 2, [(3,)])
    message = str(err.value)
    assert "pure_callback" in message
    assert "the JAX implementation of 'test_calls_host'" in message
    assert __file__ in message  # the user's line comes first


def test_an_implementation_binding_itself_is_refused():
    loop_p = Primitive("test_loops")
    loop_p.def_impl(lambda x: loop_p.bind(x))
    loop_p.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
    with pytest.raises(LoweringError, match="binds 'test_loops' again"):
        to_onnx(lambda x: loop_p.bind(x), [(3,)])


def test_jax_primitives_and_callbacks_are_never_inlined():
    from jax2onnx.registration.implementations import implementation

    assert implementation(jax.lax.sin_p) is None  # XLA's own: it only binds itself again
    from jax._src.callback import pure_callback_p

    assert implementation(pure_callback_p) is None
    assert implementation(softsign_p) is not None
