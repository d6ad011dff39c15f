"""``@onnx_function``: calls exported as ONNX functions, shared by structure."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx.inliner
import onnx.numpy_helper
import onnxruntime as ort
import pytest

from jax2onnx import onnx_function, to_onnx
from jax2onnx.plugin import Rules, case

rules = Rules("functions_test")
jax2onnx_rules = [rules]


class Dense:
    """A plain-Python layer holding weights: the shape of an NNX/Equinox module."""

    def __init__(self, d_in, d_out, seed):
        key = jax.random.key(seed)
        self.w = jax.random.normal(key, (d_in, d_out)) / np.sqrt(d_in)
        self.b = jnp.linspace(-0.5, 0.5, d_out)

    def __call__(self, x):
        return jnp.tanh(x @ self.w + self.b)


@onnx_function
class Block(Dense):
    pass


@onnx_function(unique=True, type="UniqueBlock")
class UniqueBlock(Dense):
    pass


@onnx_function(namespace="my.blocks")
def scaled_residual(x, scale):
    return x + scale * jnp.sin(x)


@onnx_function
class Outer:
    """A function whose body calls two other functions."""

    def __init__(self):
        self.first, self.second = Block(8, 8, 1), Block(8, 8, 2)

    def __call__(self, x):
        return self.second(self.first(x)) * 0.5


@onnx_function
def gated(x, *, gate):
    return jnp.where(gate, x * 2.0, -x)


@onnx_function
def reshape_by_batch(x):
    b = x.shape[0]
    return jnp.reshape(x, (b, -1)).sum(axis=1) + b


blocks = [Block(8, 8, 1), Block(8, 8, 2), Block(8, 4, 3)]
uniques = [UniqueBlock(8, 8, 1), UniqueBlock(8, 8, 2)]
outer = Outer()

rules.add_cases(
    "onnx_function",
    [
        case(
            "shared_body",
            lambda x: blocks[1](blocks[0](x)),
            [("B", 8)],
            counts={"Block": 2, "MatMul": 1},  # one body, counted once
        ),
        case(
            "two_structures",
            lambda x: blocks[2](blocks[1](blocks[0](x))),
            [("B", 8)],
            counts={"Block": 2, "Block_2": 1},
        ),
        case("unique", lambda x: uniques[1](uniques[0](x)), [("B", 8)], counts={"UniqueBlock": 1}),
        case(
            "plain_function_runtime_scale",
            lambda x, scale: scaled_residual(x, scale),
            [("B", 5)],
            input_params={"scale": 0.25},
            counts={"scaled_residual": 1},
        ),
        case("nested", lambda x: outer(x), [("B", 8)], counts={"Outer": 1, "Block": 2}),
        case(
            "input_param_in_body",
            lambda x, gate: gated(x, gate=gate),
            [("B", 3)],
            input_params={"gate": True},
            counts={"gated": 1},
        ),
        case(
            "symbolic_dims_in_body",
            reshape_by_batch,
            [("B", 2, 3)],
            counts={"reshape_by_batch": 1},
        ),
        case(
            "vmap_keeps_function",
            jax.vmap(lambda x: blocks[0](x)),
            [("B", 2, 8)],
            counts={"Block": 1},
        ),
        case(
            "grad_inlines",
            jax.grad(lambda x: jnp.sum(blocks[0](x))),
            [(3, 8)],
            counts={"Block": 0},
        ),
    ],
)


def test_case(jax2onnx_case, check_case):
    check_case(jax2onnx_case)


def _run(model, *arrays):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, arrays)))


def test_shared_function_takes_weights_as_inputs():
    model = to_onnx(lambda x: blocks[1](blocks[0](x)), [("B", 8)])
    assert [f.name for f in model.functions] == ["Block"]
    (function,) = model.functions
    assert list(function.input) == ["param_0", "param_1", "in_0"]
    baked = [
        n
        for n in function.node
        if n.op_type == "Constant" and onnx.numpy_helper.to_array(n.attribute[0].t).size >= 8
    ]
    assert not baked, "weights must be function inputs, not constants in the body"
    weights = {init.name for init in model.graph.initializer}
    calls = [n for n in model.graph.node if n.op_type == "Block"]
    assert len(calls) == 2 and calls[0].input[0] != calls[1].input[0]
    assert {calls[0].input[0], calls[1].input[0]} <= weights
    assert {i.name for i in function.value_info} >= {n.output[0] for n in function.node}


def test_functions_compute_what_the_inlined_graph_computes():
    fn = lambda x: blocks[2](outer(blocks[0](x)))  # noqa: E731
    model = to_onnx(fn, [("B", 8)])
    assert {f.name for f in model.functions} == {"Block", "Block_2", "Outer"}
    inlined = onnx.inliner.inline_local_functions(model)
    assert not inlined.functions
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    (with_functions,) = _run(model, x)
    (without,) = _run(inlined, x)
    np.testing.assert_array_equal(with_functions, without)
    np.testing.assert_allclose(with_functions, np.asarray(fn(x)), rtol=1e-5, atol=1e-6)


def test_unique_makes_one_function_per_instance():
    model = to_onnx(lambda x: uniques[1](uniques[0](uniques[0](x))), [("B", 8)])
    assert sorted(f.name for f in model.functions) == ["UniqueBlock", "UniqueBlock_2"]
    assert [n.op_type for n in model.graph.node] == ["UniqueBlock", "UniqueBlock", "UniqueBlock_2"]


def test_namespace_is_the_function_domain():
    model = to_onnx(lambda x: scaled_residual(x, 0.5), [(3,)])
    assert model.functions[0].domain == "my.blocks"
    assert {o.domain: o.version for o in model.opset_import}["my.blocks"] == 1


def test_decorator_is_transparent_outside_to_onnx():
    x = jnp.ones((2, 8))
    plain = Dense(8, 8, 1)
    np.testing.assert_array_equal(blocks[0](x), plain(x))
    assert jax.jit(lambda v: scaled_residual(v, 2.0))(x).shape == (2, 8)
    assert jax.grad(lambda v: jnp.sum(blocks[0](v)))(x).shape == (2, 8)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"type": "not an op"}, "identifier"),
        ({"name": ""}, "identifier"),
        ({"namespace": ""}, "namespace"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        onnx_function(**options)


def test_class_without_call_is_accepted_and_inlined():
    """As in jax2onnx 0.17: a helper module with methods only is left as it is."""

    @onnx_function
    class Rotary:
        def __init__(self, scale):
            self.scale = scale

        def apply(self, x):
            return jnp.sin(x) * self.scale

    model = to_onnx(lambda x: Rotary(2.0).apply(x), [(3,)])
    assert [n.op_type for n in model.graph.node] == ["Sin", "Mul"]
    assert not model.functions
