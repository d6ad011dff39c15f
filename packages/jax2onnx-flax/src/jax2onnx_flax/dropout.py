"""``nnx.Dropout`` through the jax2onnx-nn primitive ``nn.dropout``.

Dropout is identity in export (the prepared copy is deterministic). A
``deterministic`` flag passed as a runtime input binds ``nn.dropout``
(:mod:`jax2onnx_nn.dropout`), which exports ``Dropout(x, ratio,
training_mode=Not(deterministic))``; its training-time mask is ONNX Runtime's
random draw, not JAX's (cases compare ``deterministic=True`` and
mask-independent quantities only).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family
from jax2onnx_flax._util import factory_cases
from jax2onnx_nn.dropout import dropout_p, switched

family = Family("flax")
register = family.register


def _bind_dropout(original):
    @functools.wraps(original)
    def call(self, inputs, *, deterministic=None, rngs=None):
        flag = self.deterministic if deterministic is None else deterministic
        static = isinstance(flag, (bool, np.bool_))
        if flag is None or self.rate == 0.0 or (static and flag):
            return original(self, inputs, deterministic=deterministic, rngs=rngs)
        return switched(inputs, flag, self.rate, self.broadcast_dims)

    return call


family.intercept("flax.nnx.Dropout.__call__", dropout_p, binder=_bind_dropout)


def _dropout_module(rate=0.5, **kwargs):
    from flax import nnx

    return nnx.Dropout(rate, rngs=nnx.Rngs(0), **kwargs)


def _dropout_runtime(**kwargs):
    def make():
        drop = _dropout_module(**kwargs)
        return lambda x, deterministic: drop(x, deterministic=deterministic)

    return make


def _dropout_in_model():
    """A model left in training mode that forwards a runtime ``deterministic``."""
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(6, 4, rngs=rngs)
            self.drop = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x, deterministic):
            return self.drop(self.linear(x), deterministic=deterministic)

    model = Net(nnx.Rngs(0))
    model.train()
    return model


def _dropout_train_call():
    """``deterministic=False`` in the call: y is 0 or x / keep; both sides give x / keep."""
    drop = _dropout_module(0.25)

    def fn(x):
        y = drop(x, deterministic=False)
        return jnp.where(y == 0, x / 0.75, y)

    return fn


def _dropout_vmap():
    drop = _dropout_module(broadcast_dims=(0,))
    return lambda x, deterministic: jax.vmap(lambda r: drop(r, deterministic=deterministic))(x)


def _dropout_grad():
    drop = _dropout_module()
    loss = lambda x, d: (drop(x, deterministic=d) ** 2 * jnp.cos(x)).sum()  # noqa: E731
    return lambda x, deterministic: jax.grad(loss)(x, deterministic)


_TRUE = {"deterministic": True}


def _dropout_cases():
    return [
        ("dropout_train_mode_module", _dropout_module, [("B", 6)], {"counts": {"Dropout": 0}}),
        (
            "dropout_model_runtime_flag",
            _dropout_in_model,
            [("B", 6)],
            {"input_params": _TRUE, "expect": ["Dropout -> Where:Bx4"]},
        ),
        (
            "dropout_runtime_flag",
            _dropout_runtime(),
            [("B", 6)],
            {"input_params": _TRUE, "expect": ["Not -> Dropout -> Where:Bx6"]},
        ),
        (
            "dropout_broadcast_dims",
            _dropout_runtime(broadcast_dims=(-1,)),
            [("B", 3, 4)],
            {"input_params": _TRUE, "expect": ["Dropout -> Where:Bx3x4"]},
        ),
        (
            "dropout_train_call",
            _dropout_train_call,
            [("B", 6)],
            {"expect": ["Dropout"], "input_range": (0.5, 2.0)},
        ),
        (
            "dropout_vmap",
            _dropout_vmap,
            [("B", 3, 4)],
            {"input_params": _TRUE, "expect": ["Dropout"]},
        ),
        ("dropout_grad", _dropout_grad, [("B", 6)], {"input_params": _TRUE, "expect": ["Dropout"]}),
    ]


family.add_cases(dropout_p, lambda: factory_cases(_dropout_cases()))
