"""Cases of :mod:`jax2onnx_equinox.norm` (kept apart for the module's length).

Every module's arrays are drawn at random (``randomised``) so a misplaced
weight, bias or statistic changes the numbers; BatchNorm's running statistics
are set in its ``eqx.nn.State``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx_equinox._util import eqx_factory, grad_of_squares, vmapped


def randomised(module, seed=1):
    """``module`` with every float array replaced by standard normal draws (same dtype)."""
    import equinox as eqx

    rng = np.random.default_rng(seed)

    def draw(leaf):
        if eqx.is_inexact_array(leaf):
            return jnp.asarray(rng.standard_normal(leaf.shape).astype(leaf.dtype))
        return leaf

    return jax.tree.map(draw, module)


def nested(module):
    """``jax.vmap(jax.vmap(module))``: two leading batch axes."""
    return jax.vmap(jax.vmap(module))


def module(cls, *args, wrap=vmapped, **kwargs):
    """A case factory: ``eqx.nn.<cls>(*args, **kwargs)`` randomised, then ``wrap``-ped."""
    return eqx_factory(lambda eqx, key: randomised(getattr(eqx.nn, cls)(*args, **kwargs)), wrap)


def batch_norm_with_state(eqx, channels, mode="ema", inference=False, affine=True):
    """``(bn, state)`` with random weights and running statistics (``"batch"`` mode: a
    counter of 3, so inference debiases the averages)."""
    make = eqx.nn.make_with_state(eqx.nn.BatchNorm)
    bn, state = make(channels, "batch", mode=mode, inference=inference, channelwise_affine=affine)
    bn = randomised(bn)
    rng = np.random.default_rng(7)
    mean = jnp.asarray(rng.standard_normal(channels).astype(np.float32))
    var = jnp.asarray((np.abs(rng.standard_normal(channels)) + 0.5).astype(np.float32))
    if mode == "ema":
        return bn, state.set(bn.ema_state_index, (mean, var))
    state = state.set(bn.batch_counter, jnp.asarray(3))
    return bn, state.set(bn.batch_state_index, (mean, var))


def batch_norm_pair(channels, **kwargs):
    """``(bn, state)``: ``to_onnx((model, state), ...)``, one example per call."""
    return eqx_factory(lambda eqx, key: batch_norm_with_state(eqx, channels, **kwargs))


def batch_norm_vmapped(channels, grad=False, **kwargs):
    """``vmap(bn, axis_name="batch")(x, state)[0]`` in a lambda, as Equinox users batch it."""

    def build(eqx, key):
        bn, state = batch_norm_with_state(eqx, channels, **kwargs)
        axes = dict(axis_name="batch", in_axes=(0, None), out_axes=(0, None))
        fn = lambda x: jax.vmap(bn, **axes)(x, state)[0]  # noqa: E731
        return grad_of_squares(fn) if grad else fn

    return eqx_factory(build)


def spectral_norm(layer, grad=False):
    """``vmap(lambda r: sn(r, state)[0])`` of ``SpectralNorm(layer(key))``, left in
    training mode (the conversion pins inference mode)."""

    def build(eqx, key):
        k1, k2 = jax.random.split(key)
        make = eqx.nn.make_with_state(eqx.nn.SpectralNorm)
        sn, state = make(randomised(layer(eqx, k1)), "weight", key=k2)
        fn = jax.vmap(lambda r: sn(r, state)[0])
        return grad_of_squares(fn) if grad else fn

    return eqx_factory(build)


def weight_norm(layer, wrap=vmapped):
    return eqx_factory(lambda eqx, key: randomised(eqx.nn.WeightNorm(layer(eqx, key))), wrap)


def linear(eqx, key):
    return eqx.nn.Linear(4, 5, key=key)


def conv(eqx, key):
    return eqx.nn.Conv2d(2, 4, 3, key=key)


_LN = "LayerNormalization"
_RMS = "RMSNormalization"
_GN = "GroupNormalization"
_BN = "BatchNormalization"
_GRAD = lambda m: grad_of_squares(vmapped(m))  # noqa: E731


def layer_norm():
    return [
        (
            "eqx_layer_norm",
            module("LayerNorm", 6),
            [("B", 6)],
            {"expect": [f"{_LN}:Bx6"], "counts": {"ReduceMean": 0}},
        ),
        (
            "eqx_layer_norm_shape",
            module("LayerNorm", (3, 4)),
            [("B", 3, 4)],
            {"expect": [f"{_LN}:Bx3x4"], "variants": ["f32", "f64", "bf16", "f16"]},
        ),
        (
            "eqx_layer_norm_plain",
            module("LayerNorm", 5, eps=1e-3, use_weight=False, use_bias=False, wrap=None),
            [(5,)],
            {"expect": [f"{_LN}:5"]},
        ),
        (
            "eqx_layer_norm_nested_vmap",
            module("LayerNorm", 4, wrap=nested),
            [("B", 3, 4)],
            {"expect": [f"{_LN}:Bx3x4"], "counts": {"Reshape": 0}},
        ),
        (
            "eqx_layer_norm_opset16",
            module("LayerNorm", 6),
            [("B", 6)],
            {"opset": 16, "counts": {_LN: 0}},
        ),
        ("eqx_layer_norm_grad", module("LayerNorm", 6, wrap=_GRAD), [("B", 6)], {}),
    ]


def rms_norm():
    return [
        ("eqx_rms_norm", module("RMSNorm", 6), [("B", 6)], {"expect": [f"{_RMS} -> Add:Bx6"]}),
        (
            "eqx_rms_norm_plain",
            module("RMSNorm", (3, 4), use_weight=False, use_bias=False),
            [("B", 3, 4)],
            {"expect": [f"{_RMS}:Bx3x4"], "counts": {"Add": 0}},
        ),
        (
            "eqx_rms_norm_opset21",
            module("RMSNorm", 6),
            [("B", 6)],
            {"opset": 21, "counts": {_RMS: 0}},
        ),
        ("eqx_rms_norm_grad", module("RMSNorm", 6, wrap=_GRAD), [("B", 6)], {}),
    ]


def group_norm():
    return [
        (
            "eqx_group_norm",
            module("GroupNorm", 3, 6),
            [("B", 6, 4, 4)],
            {
                "expect": [f"{_GN}:Bx6x4x4"],
                "counts": {"Reshape": 0, "Transpose": 0},
                "variants": ["f32", "f64", "bf16"],  # bfloat16 computes in float32
            },
        ),
        (
            "eqx_group_norm_plain",
            module("GroupNorm", 2, channelwise_affine=False, wrap=None),
            [(4, 5)],
            {"expect": [f"Unsqueeze -> {_GN} -> Squeeze:4x5"]},
        ),
        (
            "eqx_group_norm_nested_vmap",
            module("GroupNorm", 2, 4, wrap=nested),
            [("B", 2, 4, 5)],
            {"expect": [f"Reshape -> {_GN} -> Reshape:Bx2x4x5"]},
        ),
        (
            "eqx_group_norm_opset18",
            module("GroupNorm", 3, 6),
            [("B", 6, 4)],
            {"opset": 18, "counts": {_GN: 0}},
        ),
        ("eqx_group_norm_grad", module("GroupNorm", 3, 6, wrap=_GRAD), [("B", 6, 4)], {}),
    ]


def batch_norm():
    return [
        (
            "eqx_batch_norm_vmap",
            batch_norm_vmapped(3, inference=True),
            [("B", 3, 4, 4)],
            {
                "expect": [f"{_BN}:Bx3x4x4"],
                "counts": {"Reshape": 0, "Unsqueeze": 0},
                "variants": ["f32", "f64", "bf16"],
            },
        ),
        (
            "eqx_batch_norm_train_mode_state",
            batch_norm_pair(3),
            [(3, 4, 4)],
            {"expect": [f"Unsqueeze -> {_BN} -> Squeeze:3x4x4"]},
        ),
        (
            "eqx_batch_norm_batch_mode",
            batch_norm_vmapped(5, mode="batch", affine=False),
            [("B", 5)],
            {"expect": [f"{_BN}:Bx5"], "counts": {"Div": 0, "Pow": 0}},
        ),
        ("eqx_batch_norm_grad", batch_norm_vmapped(3, grad=True), [("B", 3, 4)], {}),
    ]


def weight_norms():
    return [
        (
            "eqx_spectral_norm_linear",
            spectral_norm(linear),
            [("B", 4)],
            {"expect": ["Gemm:Bx5"], "counts": {"Div": 0, "Einsum": 0, "MatMul": 0}},
        ),
        (
            "eqx_spectral_norm_conv",
            spectral_norm(conv),
            [("B", 2, 6, 6)],
            # Equinox's Conv needs the input in the weight's dtype (float32 here)
            {"expect": ["Conv:Bx4x4x4"], "counts": {"Div": 0}, "variants": ["f32"]},
        ),
        ("eqx_spectral_norm_grad", spectral_norm(linear, grad=True), [("B", 4)], {}),
        (
            "eqx_weight_norm_linear",
            weight_norm(linear),
            [("B", 4)],
            {"expect": ["Gemm:Bx5"], "counts": {"Div": 0, "Sqrt": 0, "MatMul": 0}},
        ),
        ("eqx_weight_norm_grad", weight_norm(linear, wrap=_GRAD), [("B", 4)], {}),
    ]
