"""``eqx.nn.Linear`` as the macro primitive ``equinox.eqx_linear``; ``eqx.nn.Identity``.

An Equinox ``Linear`` maps one example ``(in_features,)`` to ``(out_features,)``
(``weight @ x + bias``, weight stored ``(out, in)``); a batch is a ``jax.vmap``.
The stand-in of ``Linear.__call__`` does at conversion time what touches only
the module's arrays: NumPy's promotion of the weight and bias to the result
dtype (a float32 weight used with float64 inputs becomes a float64
initializer, not a runtime Cast; a bfloat16 or float16 weight stays as stored
and is cast in the graph, so the file keeps the narrow weights). It reshapes a
``"scalar"`` input to ``(1,)`` and squeezes a ``"scalar"`` output around one
bind of the primitive on ``(x, weight[, bias])``.

The primitive takes any number of leading batch axes; its batching rule moves
the vmapped axis of ``x`` to the front and binds again, so a vmapped layer is
one ``Gemm`` (``transB=1``, the stored weight as it is) for a 2-D input and
``MatMul`` (weight transposed at conversion time) plus ``Add`` otherwise. A
vmap over the weights too (an ensemble built with ``eqx.filter_vmap``) is JAX's
vmap of the arithmetic, a batched ``dot_general`` the lax rules lower. JVPs are
JAX's derivative of the arithmetic. Dtypes other than float32/float64 inline
the arithmetic (``native_dtypes``).

``eqx.nn.Identity`` returns its input: it traces to nothing and needs no rule
(the ``identity`` cases check that no node is emitted for it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, at_conversion, case
from jax2onnx_equinox._util import FLOATS, eqx_factory, grad_of_squares, vmapped, x_batched

family = Family("equinox")
register = family.register


def promote_param(array, dtype):
    """A module array as ``dtype``: converted now, or staged (a Cast) for a narrow float.

    A weight narrower than float32 (bfloat16, float16) stays as stored in the
    file and is cast in the graph; a traced one (a gradient, a vmapped
    ensemble) is cast where it is computed.
    """
    if array is None or array.dtype == dtype:
        return array
    if isinstance(array, jax.core.Tracer) or np.dtype(array.dtype).itemsize < 4:
        return jnp.asarray(array).astype(dtype)
    return at_conversion(jnp.asarray, array, dtype)


def _linear(x, weight, *bias):
    """``x @ weight.T + bias`` over leading batch axes; one example as Equinox writes it.

    A vmap over the weights too (an ensemble) vmaps this function with ``x`` of one
    example: Equinox's ``weight @ x`` then batches to the dot_general the lax rules
    lower as one Einsum (``x @ weight.T`` would batch to Transpose, MatMul, Transpose).
    """
    if x.ndim == 1:
        y = lax.dot_general(weight, x, (((1,), (0,)), ((), ())))
    else:
        y = lax.dot_general(x, weight, (((x.ndim - 1,), (1,)), ((), ())))
    return y + bias[0] if bias else y


def _bind_linear(x, *rest):
    return linear_p.bind(x, *rest), 0


linear_p = family.primitive(
    "eqx_linear", impl=_linear, batching=x_batched(_linear, _bind_linear), jvp="fallback"
)


def _linear_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        scalar_in = self.in_features == "scalar"
        if not hasattr(x, "ndim") or x.ndim != (0 if scalar_in else 1):
            return original(self, x, key=key)  # Equinox's own behaviour (or error)
        bias = () if self.bias is None else (self.bias,)
        dtype = jnp.result_type(x, self.weight, *bias)
        if not jnp.issubdtype(dtype, jnp.inexact) or jnp.issubdtype(dtype, jnp.complexfloating):
            return original(self, x, key=key)
        x = jnp.reshape(x, (1,)) if scalar_in else x
        x = x if x.dtype == dtype else x.astype(dtype)
        operands = [promote_param(a, dtype) for a in (self.weight, *bias)]
        y = linear_p.bind(x, *operands)
        return jnp.squeeze(y, 0) if self.out_features == "scalar" else y

    return call


family.intercept("equinox.nn.Linear.__call__", linear_p, binder=_linear_binder)


def _linear_model(*args, wrap=vmapped, **kwargs):
    return eqx_factory(lambda eqx, key: eqx.nn.Linear(*args, key=key, **kwargs), wrap)


def _twice_vmapped(module):
    return jax.vmap(jax.vmap(module))


def _ensemble(eqx, key):
    """Three stacked Linear layers applied to one input (a vmap over the weights)."""
    layers = eqx.filter_vmap(lambda k: eqx.nn.Linear(4, 5, key=k))(jax.random.split(key, 3))
    return lambda x: eqx.filter_vmap(lambda layer: layer(x))(layers)


def _grad(module):
    return grad_of_squares(vmapped(module))


family.add_cases(
    linear_p,
    lambda: [
        case(
            "linear_vmapped",
            _linear_model(4, 5),
            [("B", 4)],
            factory=True,
            expect=["Gemm:Bx5"],
            counts={"Gemm": 1, "MatMul": 0, "Cast": 0, "Transpose": 0},
        ),
        case(
            "linear_unbatched",
            _linear_model(4, 5, wrap=None),
            [(4,)],
            factory=True,
            expect=["MatMul -> Add:5"],
            counts={"Transpose": 0, "Unsqueeze": 0},
        ),
        case(
            "linear_two_batch_axes",
            _linear_model(4, 5, wrap=_twice_vmapped),
            [("B", 3, 4)],
            factory=True,
            expect=["MatMul -> Add:Bx3x5"],
            counts={"Reshape": 0, "Gemm": 0, "Transpose": 0},
            variants=["f32", "f64", "bf16", "f16"],  # half inputs promote to float32
        ),
        case(
            "linear_no_bias",
            _linear_model(4, 5, use_bias=False),
            [("B", 4)],
            factory=True,
            expect=["Gemm:Bx5"],
            counts={"Add": 0, "MatMul": 0},
        ),
        case(
            "linear_scalar_in_out",
            _linear_model("scalar", "scalar"),
            [("B",)],
            factory=True,
            expect=["Gemm"],
            counts={"Gemm": 1},
        ),
        case(
            # bfloat16 weights stay bfloat16 in the file; the graph casts them for the Gemm
            "linear_bfloat16_weights",
            _linear_model(4, 5, dtype=jnp.bfloat16),
            [("B", 4)],
            factory=True,
            variants=["f32"],
            expect=["Cast -> Gemm:Bx5"],
            counts={"Cast": 2},
        ),
        case(
            "linear_ensemble",
            eqx_factory(_ensemble),
            [(4,)],
            factory=True,
            # the stacked weights against one input: one MatMul for all members
            expect=["MatMul -> Add:3x5"],
            counts={"Gemm": 0, "Transpose": 0},
        ),
        case("linear_grad", _linear_model(4, 5, wrap=_grad), [(3, 4)], factory=True),
    ],
)


@family.lowering(linear_p, native_dtypes=FLOATS)
def linear(ctx, x, weight, *bias):
    """Gemm(transB=1) for a 2-D input, MatMul (+ Add) on the transposed weight otherwise."""
    if ctx.avals_in[0].ndim == 2:
        return ctx.op.Gemm(x, weight, *bias, transB=1)
    y = ctx.op.MatMul(x, ctx.transpose(weight, [1, 0]))
    return ctx.op.Add(y, bias[0]) if bias else y


# -- eqx.nn.Identity: no rule, no node ------------------------------------------------


def _identity_sandwich(eqx, key):
    """Identity between two Linear layers: the Gemms meet directly."""
    first, second = eqx.nn.Linear(4, 3, key=key), eqx.nn.Linear(3, 2, key=key)
    model = eqx.nn.Sequential([first, eqx.nn.Identity(), second])
    return jax.vmap(model)


family.add_cases(
    "equinox.identity",
    lambda: [
        case(
            "identity_between_layers",
            eqx_factory(_identity_sandwich),
            [("B", 4)],
            factory=True,
            expect=["Gemm -> Gemm:Bx2"],
            counts={"Identity": 0, "Gemm": 2},
        ),
    ],
)
