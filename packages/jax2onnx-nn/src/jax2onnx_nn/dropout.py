"""Dropout switched at run time: the macro primitive ``nn.dropout`` that layer plugins bind.

JAX has no dropout primitive: every library draws a mask with ``jax.random`` and
selects. A layer whose mode is a *runtime* flag (Flax's ``deterministic``,
Equinox's ``inference``, given to ``to_onnx`` as an ``input_param``) and that has no
key of the caller's to draw JAX's mask with exports as ONNX
``Dropout(x, ratio, training_mode=Not(flag))``: identity when the flag is true, ONNX
Runtime's own random mask otherwise. Layer plugins call :func:`switched` from their
stand-ins; the primitive is public so they share one rule, batching and JVP.

``dropout_p.bind(x, flag, rate=r, broadcast_dims=dims)`` returns ``(y, mask)``.
With ``broadcast_dims`` one mask value serves every index of those axes: the
Dropout draws on ones of the mask's shape and ``Where`` applies it. The JVP
reuses the primitive's mask, so the tangent sees the primal's draw. The ``impl``
draws from a fixed key (JAX evaluates it only for shapes while ``to_onnx``
traces); cases compare a true flag and mask-independent quantities only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching

from jax2onnx.plugin import Family, case

family = Family("nn")
register = family.register


def _dropout_impl(x, flag, *, rate, broadcast_dims):
    """``(y, mask)``: dropout switched off by an array flag."""
    x = jnp.asarray(x)  # a NumPy bfloat16 operand would divide to float32
    keep = 1.0 - rate
    shape = list(x.shape)
    for d in broadcast_dims:
        shape[d] = 1
    mask = jnp.broadcast_to(jax.random.bernoulli(jax.random.key(0), keep, shape), x.shape)
    mask = mask | flag
    y = jnp.where(flag, x, jax.lax.select(mask, x / keep, jnp.zeros_like(x)))
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


def switched(inputs, flag, rate, broadcast_dims=()):
    """Dropout at ``rate`` switched off by ``flag`` (an array or a bool): ``dropout_p``,
    or a Where for ``rate == 1`` (everything dropped in training mode)."""
    flag = jnp.asarray(flag, bool)
    if rate == 1.0:
        return jnp.where(flag, inputs, jnp.zeros_like(inputs))
    dims = tuple(int(d) % jnp.ndim(inputs) for d in broadcast_dims)
    y, _ = dropout_p.bind(inputs, flag, rate=float(rate), broadcast_dims=dims)
    return y


# -- cases ------------------------------------------------------------------------------


def _flagged(x, flag):
    return switched(x, flag, 0.5)


def _mask_free(x, flag):
    """``where(y == 0, x / keep, y)`` is ``x / keep`` in training mode whatever the draw."""
    y = switched(x, flag, 0.25)
    return jnp.where(y == 0, jnp.divide(x, 0.75), y)  # (NumPy's bfloat16 x / 0.75 is float32)


def _broadcast(x, flag):
    return switched(x, flag, 0.5, broadcast_dims=(-1,))


def _vmapped_flags(x, flags):
    """A vmapped runtime flag; compares the mask-free quantity."""
    y, _ = jax.vmap(lambda r, f: dropout_p.bind(r, f, rate=0.5, broadcast_dims=()))(x, flags)
    return jnp.where(flags[:, None], y, jnp.where(y == 0, x / 0.5, y))


def _grad(x, flag):
    return jax.grad(lambda v: (switched(v, flag, 0.5) ** 2 * jnp.cos(v)).sum())(x)


_TRUE = np.array(True)
_FALSE = np.array(False)
_FLAGS = np.array([True, False, True, False])


@family.lowering(
    dropout_p,
    cases=lambda: [
        case("dropout_flag", _flagged, [("B", 6), _TRUE], expect=["Not -> Dropout -> Where:Bx6"]),
        case(
            "dropout_training",
            _mask_free,
            [("B", 6), _FALSE],
            expect=["Dropout -> Where -> Equal"],
            input_range=(0.5, 2.0),
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "dropout_broadcast_dims",
            _broadcast,
            [("B", 3, 4), _TRUE],
            expect=["Dropout -> Where:Bx3x4"],
        ),
        case("dropout_vmap_flags", _vmapped_flags, [(4, 3), _FLAGS], input_range=(0.5, 2.0)),
        case("dropout_grad", _grad, [("B", 6), _TRUE], expect=["Dropout"]),
    ],
)
def dropout(ctx, x, flag, *, rate, broadcast_dims):
    """``Dropout(x, ratio, training_mode=Not(flag))`` and its mask, ``Where(mask, y, 0)``.

    The Where changes no number (``y`` is 0 where the mask is false); it uses the
    mask, which keeps ONNX Runtime's ``EliminateDropout`` away: that rewrite drops
    every Dropout whose mask is unused, whatever its ``training_mode``, and wires the
    mode's producer into the consumers (a session that fails to build, or a model
    that never drops). With ``broadcast_dims`` the Dropout draws its mask on ones of
    the mask's shape and ``Where(mask, x / keep or x, 0)`` applies it.
    """
    dt = np.dtype(ctx.avals_in[0].dtype)
    known = ctx.inputs[1].const_value
    training = ctx.op.Not(flag) if known is None else ctx.const(np.logical_not(known.numpy()))
    ratio = np.asarray(rate, dt)
    if not broadcast_dims:
        y, mask = ctx.op.Dropout(x, ratio, training, _outputs=2)
        return ctx.op.Where(mask, y, np.zeros((), dt)), mask
    shape = list(ctx.avals_in[0].shape)
    small = [1 if a in broadcast_dims else d for a, d in enumerate(shape)]
    ones = ctx.op.Expand(np.ones((), dt), ctx.shape(small))
    _, mask = ctx.op.Dropout(ones, ratio, training, _outputs=2)
    kept = ctx.op.Where(training, ctx.op.Div(x, np.asarray(1.0 - rate, dt)), x)
    return ctx.op.Where(mask, kept, np.zeros((), dt)), ctx.op.Expand(mask, ctx.shape(shape))
