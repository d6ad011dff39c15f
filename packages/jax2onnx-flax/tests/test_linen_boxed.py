"""Boxed Linen parameters (``nn.with_logical_partitioning``) convert as unboxed ones, and an
uninitialised ``nnx.bridge.ToNNX`` is refused with what to do.

The cases (``linen_boxed_*``, ``linen_lm1b_block*``) compare each boxed layer with
Flax; these checks compare the export of a boxed model with the export of the
same model unboxed: the same graph, the same numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
from flax import linen as nn
from flax import nnx
from flax.core import meta

from jax2onnx import to_onnx
from jax2onnx.plugin import UsageError
from jax2onnx_flax import linen_models
from jax2onnx_flax._util import linen_params, perturbed


def _logical(init, *names):
    return nn.with_logical_partitioning(init, names)


_K = nn.initializers.lecun_normal()
_ONES, _SMALL = nn.initializers.ones, nn.initializers.normal(0.5)

# (id, layer, input shape): every Linen stand-in that reads parameters, boxed
LAYERS = [
    (
        "layer_norm",
        lambda: nn.LayerNorm(scale_init=_logical(_ONES, "e"), bias_init=_logical(_SMALL, "e")),
        (3, 6),
    ),
    ("rms_norm", lambda: nn.RMSNorm(scale_init=_logical(_ONES, "e")), (3, 6)),
    ("group_norm", lambda: nn.GroupNorm(2, scale_init=_logical(_ONES, "e")), (3, 4, 6)),
    (
        "batch_norm",
        lambda: nn.BatchNorm(use_running_average=True, bias_init=_logical(_SMALL, "e")),
        (3, 6),
    ),
    ("dense", lambda: nn.Dense(5, kernel_init=_logical(_K, "e", "m")), (3, 6)),
    (
        "dense_general",
        lambda: nn.DenseGeneral((2, 3), kernel_init=_logical(_K, "e", "h", "k")),
        (3, 6),
    ),
    ("conv", lambda: nn.Conv(4, (3,), kernel_init=_logical(_K, "w", "e", "m")), (2, 5, 6)),
    (
        "attention",
        lambda: nn.MultiHeadDotProductAttention(2, kernel_init=_logical(_K, "e", "h", "k")),
        (2, 4, 6),
    ),
    (
        "gru",
        lambda: nn.RNN(
            nn.GRUCell(4, kernel_init=_logical(_K, "e", "m"), bias_init=_logical(_SMALL, "m"))
        ),
        (2, 3, 6),
    ),
]


def _ops(model):
    return [node.op_type for node in model.graph.node]


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@pytest.mark.parametrize("make, shape", [row[1:] for row in LAYERS], ids=[row[0] for row in LAYERS])
def test_boxed_layer_exports_as_unboxed(make, shape):
    module = make()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    boxed = perturbed(module.init(jax.random.key(0), jnp.ones(shape)))
    assert any(
        isinstance(leaf, nn.LogicallyPartitioned)
        for leaf in jax.tree.leaves(boxed, is_leaf=lambda v: isinstance(v, meta.AxisMetadata))
    )
    plain = meta.unbox(boxed)
    from_boxed = to_onnx(module.bind(boxed), [x])
    from_plain = to_onnx(module.bind(plain), [x])
    assert _ops(from_boxed) == _ops(from_plain)
    np.testing.assert_array_equal(_run(from_boxed, x), _run(from_plain, x))
    np.testing.assert_allclose(_run(from_boxed, x), module.apply(plain, x), rtol=1e-5, atol=1e-5)


def test_linen_params_unboxes_what_module_param_gives():
    module = nn.LayerNorm(
        scale_init=_logical(_ONES, "e"), bias_init=nn.with_partitioning(_SMALL, (None,))
    )
    variables = module.init(jax.random.key(0), jnp.ones((2, 3)))
    bound = module.bind(variables)
    params = linen_params(bound)
    assert set(params) == {"scale", "bias"}
    for name in ("scale", "bias"):
        assert not isinstance(params[name], meta.AxisMetadata)
        np.testing.assert_array_equal(params[name], meta.unbox(variables["params"][name]))


def test_lm1b_decoder_params_are_all_boxed():
    _, variables = linen_models.lm1b()
    leaves = jax.tree.leaves(variables, is_leaf=lambda v: isinstance(v, meta.AxisMetadata))
    assert leaves and all(isinstance(leaf, nn.LogicallyPartitioned) for leaf in leaves)


_LAZY_INIT = r"nnx\.bridge\.lazy_init\(module, x\)"


def test_uninitialised_to_nnx_names_lazy_init():
    bridged = nnx.bridge.ToNNX(nn.Dense(3), rngs=nnx.Rngs(0))
    with pytest.raises(UsageError, match=r"ToNNX\(Dense\) has not been initialised") as info:
        to_onnx(bridged, [jnp.ones((2, 4))])
    assert "nnx.bridge.lazy_init(module, x)" in str(info.value)


def test_uninitialised_to_nnx_inside_an_nnx_model():
    class Outer(nnx.Module):
        def __init__(self):
            self.inner = nnx.bridge.ToNNX(nn.Dense(3), rngs=nnx.Rngs(0))

        def __call__(self, x):
            return 2.0 * self.inner(x)

    model = Outer()
    with pytest.raises(UsageError, match=_LAZY_INIT):
        to_onnx(model, [jnp.ones((2, 4))])
    nnx.bridge.lazy_init(model, jnp.ones((2, 4)))  # what the message says: then it converts
    assert _ops(to_onnx(model, [jnp.ones((2, 4))])) == ["Gemm", "Mul"]


def test_to_nnx_without_variables_needs_no_initialisation():
    bridged = nnx.bridge.ToNNX(nn.Dropout(0.5, deterministic=True), rngs=nnx.Rngs(0))
    assert _ops(to_onnx(bridged, [jnp.ones((2, 4))])) == ["Identity"]
