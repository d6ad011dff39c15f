"""Linen normalisation stand-ins: Flax's own numbers and dtypes, and ``normalization_mode``.

The cases compare ONNX Runtime with Flax; these checks evaluate the stand-ins
themselves in JAX (the primitives' Flax arithmetic) against Flax's own method
in the dtype combinations where Linen's arithmetic differs from the NNX
layers' (Linen does not promote the input; BatchNorm's factor stays in the
running statistics' dtype), and the export's graph under each
``normalization_mode`` (a conversion option the case format has no field for).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx_flax import linen, plugin
from jax2onnx_flax._util import perturbed

nn = pytest.importorskip("flax.linen")

RUNNING = {"use_running_average": True}

# (id, layer, input shape, input dtype, x64, call kwargs)
LAYERS = [
    ("bn", lambda: nn.BatchNorm(), (3, 5), np.float32, False, RUNNING),
    ("bn_f64_input", lambda: nn.BatchNorm(), (3, 5), np.float64, True, RUNNING),
    ("bn_f64_plain", lambda: nn.BatchNorm(use_scale=False), (3, 5), np.float64, True, RUNNING),
    (
        "bn_two_axes_nhwc",
        lambda: nn.BatchNorm(axis=(1, 3)),
        (2, 3, 4, 5),
        np.float32,
        False,
        RUNNING,
    ),
    ("bn_f16_input", lambda: nn.BatchNorm(), (3, 5), np.float16, False, RUNNING),
    ("bn_dtype_f16", lambda: nn.BatchNorm(dtype=jnp.float16), (3, 5), np.float32, False, RUNNING),
    (
        "bn_bf16_stats",
        lambda: nn.BatchNorm(param_dtype=jnp.bfloat16, force_float32_reductions=False),
        (3, 5),
        np.float32,
        False,
        RUNNING,
    ),
    ("ln_dtype_f16", lambda: nn.LayerNorm(dtype=jnp.float16), (3, 5), np.float32, False, {}),
    ("ln_dtype_f64", lambda: nn.LayerNorm(dtype=jnp.float64), (3, 5), np.float32, True, {}),
    (
        "ln_f16_plain",
        lambda: nn.LayerNorm(use_scale=False, use_bias=False),
        (3, 5),
        np.float16,
        False,
        {},
    ),
    (
        "ln_bf16_params",
        lambda: nn.LayerNorm(param_dtype=jnp.bfloat16),
        (3, 5),
        np.float32,
        False,
        {},
    ),
    (
        "ln_half_reductions",
        lambda: nn.LayerNorm(force_float32_reductions=False, param_dtype=jnp.float16),
        (3, 5),
        np.float16,
        False,
        {},
    ),
    ("ln_f64_params", lambda: nn.LayerNorm(param_dtype=jnp.float64), (3, 5), np.float32, True, {}),
    ("rms_f64", lambda: nn.RMSNorm(), (3, 5), np.float64, True, {}),
    (
        "gn_group_size",
        lambda: nn.GroupNorm(num_groups=None, group_size=2),
        (2, 3, 4),
        np.float32,
        False,
        {},
    ),
    (
        "gn_dtype_f16",
        lambda: nn.GroupNorm(num_groups=2, dtype=jnp.float16),
        (2, 3, 4),
        np.float32,
        False,
        {},
    ),
]


def _bound(make, shape):
    module = make()
    variables = module.init(jax.random.key(0), jnp.ones(shape), **_init_kwargs(module))
    return module, perturbed(variables, 0.3)


def _init_kwargs(module):
    return (
        RUNNING if isinstance(module, nn.BatchNorm) and module.use_running_average is None else {}
    )


@pytest.mark.parametrize(
    ("name", "make", "shape", "dtype", "x64", "kwargs"), LAYERS, ids=[r[0] for r in LAYERS]
)
def test_stand_in_computes_flax_numbers_and_dtype(name, make, shape, dtype, x64, kwargs):
    with jax.enable_x64(x64):
        module, variables = _bound(make, shape)
        x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
        want = module.apply(variables, x, **kwargs)  # Flax's own method, no interceptor
        table = linen.declared(plugin.FAMILIES, "jax2onnx_flax")
        with linen.tracing_context(table):  # the stand-ins, evaluated eagerly
            got = module.apply(variables, x, **kwargs)
        assert got.dtype == want.dtype
        tight = 1e-12 if want.dtype == np.float64 else 1e-6
        np.testing.assert_allclose(
            np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tight, atol=tight
        )


def _ops(model):
    return [n.op_type for n in model.graph.node]


MODES = [
    ("LayerNorm", lambda: nn.LayerNorm(), (4, 6), "LayerNormalization"),
    ("RMSNorm", lambda: nn.RMSNorm(), (4, 6), "RMSNormalization"),
    ("GroupNorm", lambda: nn.GroupNorm(num_groups=3), (2, 5, 6), "GroupNormalization"),
]


@pytest.mark.parametrize("mode", ["auto", "prefer_native", "force_decomposed"])
@pytest.mark.parametrize(("name", "make", "shape", "op"), MODES, ids=[m[0] for m in MODES])
def test_normalization_mode_picks_the_form_and_keeps_the_numbers(mode, name, make, shape, op):
    module, variables = _bound(make, shape)
    bound = module.bind(variables)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    model = to_onnx(bound, [shape], normalization_mode=mode)
    assert (op in _ops(model)) == (mode != "force_decomposed"), _ops(model)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, module.apply(variables, x), rtol=1e-5, atol=1e-5)


def _session(model):
    onnx.checker.check_model(model, full_check=True)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_batch_norm_training_without_mutable_statistics_normalises_with_the_batch():
    """Flax refuses the update; the export normalises as Flax's training step does."""
    module, variables = _bound(lambda: nn.BatchNorm(), (4, 3))
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    model = to_onnx(lambda a: module.apply(variables, a, use_running_average=False), [x.shape])
    (got,) = _session(model).run(None, {model.graph.input[0].name: x})
    want, _ = module.apply(variables, x, use_running_average=False, mutable=["batch_stats"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "BatchNormalization" not in _ops(model)


def test_dropout_training_without_a_key_is_onnx_dropout():
    """Flax has no key to draw with; the export draws with ONNX Runtime (mask-free check)."""
    module = nn.Dropout(0.5)
    x = np.random.default_rng(3).uniform(0.5, 2.0, (4, 6)).astype(np.float32)
    model = to_onnx(lambda a: module.apply({}, a, deterministic=False), [x.shape])
    assert "Dropout" in _ops(model)
    (got,) = _session(model).run(None, {model.graph.input[0].name: x})
    kept = got != 0
    np.testing.assert_allclose(got[kept], x[kept] / 0.5, rtol=1e-6)
    assert 0 < kept.sum() < kept.size
