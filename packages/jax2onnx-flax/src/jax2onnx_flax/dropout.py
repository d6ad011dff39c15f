"""``nnx.Dropout`` as a macro primitive.

Dropout is identity in export (the prepared copy is deterministic). A
``deterministic`` flag passed as a runtime input keeps ``Dropout(x, ratio,
training_mode=Not(deterministic))``; its training-time mask is ONNX Runtime's
random draw, not JAX's (cases compare ``deterministic=True`` and
mask-independent quantities only). The JVP reuses the primitive's mask so the
gradient sees the primal's draw.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching

from jax2onnx.plugin import Family, case
from jax2onnx_flax._util import const_value, factory_cases

family = Family("flax")
register = family.register

# -- Dropout ------------------------------------------------------------------------


def _dropout_impl(x, deterministic, *, rate, broadcast_dims):
    """``(y, mask)``: Flax's dropout switched by an array flag.

    The mask comes from a fixed key: JAX evaluates this primitive only for
    shapes while ``to_onnx`` traces; the exported ``Dropout`` draws its own.
    """
    keep = 1.0 - rate
    shape = list(x.shape)
    for d in broadcast_dims:
        shape[d] = 1
    mask = jnp.broadcast_to(jax.random.bernoulli(jax.random.key(0), keep, shape), x.shape)
    mask = mask | deterministic
    y = jnp.where(deterministic, x, jax.lax.select(mask, x / keep, jnp.zeros_like(x)))
    return y, mask


def _dropout_batching(args, dims, *, rate, broadcast_dims):
    """Input batched: bind again with the broadcast dims renumbered; a batched flag
    selects between the input and one training-mode Dropout."""
    x, flag = args
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    x = batching.bdim_at_front(x, dims[0], size)
    dims_ = tuple(d % (x.ndim - 1) + 1 for d in broadcast_dims)
    if dims[1] is None:
        return dropout_p.bind(x, flag, rate=rate, broadcast_dims=dims_), [0, 0]
    flag = jnp.moveaxis(flag, dims[1], 0).reshape((size,) + (1,) * (x.ndim - 1))
    y, mask = dropout_p.bind(x, jnp.asarray(False), rate=rate, broadcast_dims=dims_)
    return [jnp.where(flag, x, y), mask | flag], [0, 0]


def _dropout_jvp(primals, tangents, *, rate, broadcast_dims):
    """The tangent goes through the primal's own mask (one Dropout draw)."""
    x, flag = primals
    dx = ad.instantiate_zeros(tangents[0])
    y, mask = dropout_p.bind(x, flag, rate=rate, broadcast_dims=broadcast_dims)
    kept = jnp.where(mask, dx / (1.0 - rate), jnp.zeros_like(dx))
    dy = jnp.where(flag, dx, kept)
    return [y, mask], [dy, ad.Zero(jax.typeof(mask).to_tangent_aval())]


dropout_p = family.primitive(
    "dropout",
    impl=_dropout_impl,
    batching=_dropout_batching,
    jvp=_dropout_jvp,
    multiple_results=True,
)


def _bind_dropout(original):
    @functools.wraps(original)
    def call(self, inputs, *, deterministic=None, rngs=None):
        flag = self.deterministic if deterministic is None else deterministic
        static = isinstance(flag, (bool, np.bool_))
        if flag is None or self.rate == 0.0 or (static and flag):
            return original(self, inputs, deterministic=deterministic, rngs=rngs)
        return switched(inputs, flag, self.rate, self.broadcast_dims)

    return call


def switched(inputs, flag, rate, broadcast_dims):
    """Dropout at ``rate`` switched off by ``flag`` (an array or a bool): ``dropout_p``,
    or a Where for ``rate == 1`` (everything dropped in training mode)."""
    flag = jnp.asarray(flag, bool)
    if rate == 1.0:
        return jnp.where(flag, inputs, jnp.zeros_like(inputs))
    dims = tuple(int(d) % jnp.ndim(inputs) for d in broadcast_dims)
    y, _ = dropout_p.bind(inputs, flag, rate=float(rate), broadcast_dims=dims)
    return y


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


def _dropout_flags(x, flags):
    """A vmapped runtime flag; compares ``where(y == 0, x / keep, y)``, which is mask-free."""
    y, _ = jax.vmap(lambda r, f: dropout_p.bind(r, f, rate=0.5, broadcast_dims=()))(x, flags)
    return jnp.where(flags[:, None], y, jnp.where(y == 0, x / 0.5, y))


_TRUE = {"deterministic": True}
_DROPOUT_CASES = [
    ("dropout_train_mode_module", _dropout_module, [("B", 6)], {"counts": {"Dropout": 0}}),
    (
        "dropout_model_runtime_flag",
        _dropout_in_model,
        [("B", 6)],
        {"input_params": _TRUE, "expect": ["Dropout:Bx4"]},
    ),
    (
        "dropout_runtime_flag",
        _dropout_runtime(),
        [("B", 6)],
        {"input_params": _TRUE, "expect": ["Not -> Dropout:Bx6"]},
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
    ("dropout_vmap", _dropout_vmap, [("B", 3, 4)], {"input_params": _TRUE, "expect": ["Dropout"]}),
    ("dropout_grad", _dropout_grad, [("B", 6)], {"input_params": _TRUE, "expect": ["Dropout"]}),
]
_FLAGS = np.array([True, False, True, False])


@family.lowering(
    dropout_p,
    cases=[
        *factory_cases(_DROPOUT_CASES),
        case(
            "dropout_vmap_flags",
            _dropout_flags,
            [(4, 3), _FLAGS],
            expect=["Dropout"],
            input_range=(0.5, 2.0),
        ),
    ],
)
def dropout(ctx, x, deterministic, *, rate, broadcast_dims):
    """``Dropout(x, ratio, training_mode=Not(deterministic))`` and its mask.

    With ``broadcast_dims`` the Dropout draws its mask on ones of the mask's
    shape and ``Where(mask, x / keep or x, 0)`` applies it (its scaled first
    output cannot feed a Mul: ONNX Runtime 1.31 then fails to build the session).
    """
    dt = np.dtype(ctx.avals_in[0].dtype)
    flag = const_value(deterministic)
    training = ctx.op.Not(deterministic) if flag is None else ctx.const(np.logical_not(flag))
    ratio = np.asarray(rate, dt)
    if not broadcast_dims:
        return ctx.op.Dropout(x, ratio, training, _outputs=2)
    shape = list(ctx.avals_in[0].shape)
    small = [1 if a in broadcast_dims else d for a, d in enumerate(shape)]
    ones = ctx.op.Expand(np.ones((), dt), ctx.shape(small))
    _, mask = ctx.op.Dropout(ones, ratio, training, _outputs=2)
    kept = ctx.op.Where(training, ctx.op.Div(x, np.asarray(1.0 - rate, dt)), x)
    return ctx.op.Where(mask, kept, np.zeros((), dt)), ctx.op.Expand(mask, ctx.shape(shape))
