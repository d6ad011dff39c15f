"""Equinox pooling layers as the macro primitives ``equinox.eqx_max_pool``/``eqx_avg_pool``.

Equinox pools one example ``(channels, spatial...)`` with ``lax.reduce_window``
(padding filled with the window's ``init``: ``-inf`` for max, ``0`` for sums);
``AvgPool*d`` divides every window sum by the full kernel size, padding
included. The stand-ins bind the primitives on ``x`` with the padding Equinox
uses (``use_ceil`` adds ``stride`` to the high side where windows do not fit
evenly); the primitives take any number of leading batch axes, and the
batching rule moves the vmapped axis to the front and binds again, so a vmapped
pool is one ONNX op whose N is the batch (Unsqueeze/Squeeze for one example, a
Reshape for several batch axes; see :func:`jax2onnx_equinox.conv.in_nc_layout`).

- ``MaxPool1d/2d/3d`` and any ``eqx.nn.Pool`` with ``init=-inf, operation=lax.max``
  -> ``MaxPool``, with the lax plugin's NaN/``-inf`` correction
  (:func:`jax2onnx_lax.blocks.nan_exact_max_pool`: ONNX Runtime's MaxPool skips
  NaN and starts from the lowest finite float).
- ``AvgPool1d/2d/3d`` -> ``AveragePool(count_include_pad=1)``;
  ``GlobalAveragePool`` when the window is the whole input.
- ``AdaptiveAvgPool*``/``AdaptiveMaxPool*`` whose target divides every spatial
  size are such a pool with ``kernel = stride = size // target``.

High padding that ``use_ceil`` adds beyond the last window is trimmed (it
reaches no window), so no ``ceil_mode`` is needed: ONNX Runtime's ceil mode
would divide a partial window by fewer elements, Equinox by the kernel size.
Pads not smaller than the window (ONNX Runtime refuses them), symbolic sizes
that ``use_ceil`` needs, float64 averages (ONNX Runtime has no float64
AveragePool), other ``Pool`` operations and adaptive targets that do not divide
the input (Equinox's head/tail split has two window sizes) run Equinox's own
computation, which the lax rules convert. JVPs are JAX's derivative of the
``reduce_window`` arithmetic.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic, kernel_dtypes
from jax2onnx_equinox._util import eqx_factory, grad_of_squares, vmapped
from jax2onnx_equinox.conv import front_batched, in_nc_layout
from jax2onnx_lax.blocks import nan_exact_max_pool

family = Family("equinox")
register = family.register


def _window(x, kernel, strides, padding):
    lead = x.ndim - len(kernel)
    return (1,) * lead + kernel, (1,) * lead + strides, ((0, 0),) * lead + padding


def _max_pool(x, *, kernel, strides, padding):
    # Python scalars as Equinox passes them: lax then binds reduce_window_max/_sum
    return lax.reduce_window(x, -jnp.inf, lax.max, *_window(x, kernel, strides, padding))


def _avg_pool(x, *, kernel, strides, padding):
    total = lax.reduce_window(x, 0, lax.add, *_window(x, kernel, strides, padding))
    return total / math.prod(kernel)


max_pool_p = family.primitive(
    "eqx_max_pool", impl=_max_pool, batching=front_batched(lambda: max_pool_p), jvp="fallback"
)
avg_pool_p = family.primitive(
    "eqx_avg_pool", impl=_avg_pool, batching=front_batched(lambda: avg_pool_p), jvp="fallback"
)


def _is_float(x):
    return hasattr(x, "ndim") and jnp.issubdtype(x.dtype, jnp.floating)


def _is_neg_inf(value):
    try:
        return np.ndim(value) == 0 and float(value) == -math.inf
    except (TypeError, ValueError):
        return False


def _pool_params(module, x):
    """The primitive's parameters for ``module(x)``, or None when Equinox should run."""
    if not _is_float(x) or x.ndim != module.num_spatial_dims + 1:
        return None
    padding = module.padding
    if module.use_ceil:
        if any(is_symbolic(d) for d in x.shape[1:]):
            return None
        padding = module._update_padding_for_ceil(x.shape)
    if any(max(lo, hi) > k for (lo, hi), k in zip(padding, module.kernel_size)):
        return None  # Equinox raises its own error
    return dict(
        kernel=tuple(module.kernel_size),
        strides=tuple(module.stride),
        padding=tuple((int(lo), int(hi)) for lo, hi in padding),
    )


def _pool_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        params = None
        if self.operation is lax.max and _is_neg_inf(self.init):
            params = _pool_params(self, x)
        if params is None:
            return original(self, x, key=key)
        return max_pool_p.bind(x, **params)

    return call


def _avg_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        params = _pool_params(self, x) if self.operation is lax.add else None
        if params is None:
            return original(self, x, key=key)
        return avg_pool_p.bind(x, **params)

    return call


def _adaptive_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        prim = {id(jnp.mean): avg_pool_p, id(jnp.max): max_pool_p}.get(id(self.operation))
        target = tuple(self.target_shape)
        spatial = x.shape[1:] if _is_float(x) else ()
        if (
            prim is None
            or len(spatial) != len(target)
            or any(is_symbolic(d) or int(d) % t for d, t in zip(spatial, target))
        ):
            return original(self, x, key=key)  # uneven windows: Equinox's head/tail split
        kernel = tuple(int(d) // t for d, t in zip(spatial, target))
        return prim.bind(x, kernel=kernel, strides=kernel, padding=((0, 0),) * len(kernel))

    return call


family.intercept("equinox.nn.Pool.__call__", max_pool_p, binder=_pool_binder)
for _n in (1, 2, 3):
    family.intercept(f"equinox.nn.AvgPool{_n}d.__call__", avg_pool_p, binder=_avg_binder)
family.intercept("equinox.nn.AdaptivePool.__call__", None, binder=_adaptive_binder)


def _pool_attrs(ctx, kernel, strides, padding):
    """MaxPool/AveragePool attributes (trailing pads no window reaches trimmed), or None."""
    n = len(kernel)
    spatial = ctx.avals_in[0].shape[-n:]
    pads = []
    for d, k, s, (lo, hi) in zip(spatial, kernel, strides, padding):
        if not is_symbolic(d):
            last = (int(d) + lo + hi - k) // s * s + k  # one past the last window, padded
            hi = min(hi, max(last - int(d) - lo, 0))
        pads.append((lo, hi))
    if not 1 <= n <= 3 or any(
        p < 0 or p >= k for (lo, hi), k in zip(pads, kernel) for p in (lo, hi)
    ):
        return None
    return dict(
        kernel_shape=list(kernel),
        strides=list(strides),
        pads=[lo for lo, _ in pads] + [hi for _, hi in pads],
    )


@family.lowering(max_pool_p, native_dtypes=kernel_dtypes("MaxPool"))
def max_pool(ctx, x, *, kernel, strides, padding):
    """One MaxPool (NaN/-inf corrected) on the (N, C, spatial...) view."""
    attrs = _pool_attrs(ctx, kernel, strides, padding)
    if attrs is None:
        return ctx.fallback()
    dtype = np.dtype(ctx.avals_in[0].dtype)
    return in_nc_layout(ctx, x, len(kernel), lambda v: nan_exact_max_pool(ctx, v, dtype, **attrs))


@family.lowering(avg_pool_p, native_dtypes=kernel_dtypes("AveragePool"))
def avg_pool(ctx, x, *, kernel, strides, padding):
    """AveragePool(count_include_pad=1), or GlobalAveragePool for a whole-input window."""
    attrs = _pool_attrs(ctx, kernel, strides, padding)
    if attrs is None:
        return ctx.fallback()
    spatial = ctx.avals_in[0].shape[-len(kernel) :]
    if not any(attrs["pads"]) and list(spatial) == list(kernel):
        return in_nc_layout(ctx, x, len(kernel), ctx.op.GlobalAveragePool)
    pool = functools.partial(ctx.op.AveragePool, count_include_pad=1, **attrs)
    return in_nc_layout(ctx, x, len(kernel), pool)


# -- cases ------------------------------------------------------------------------------


def _layer(cls, *args, wrap=vmapped, **kwargs):
    return eqx_factory(lambda eqx, key: getattr(eqx.nn, cls)(*args, **kwargs), wrap)


def _generic_pool(init, operation_name, wrap=vmapped):
    build = lambda eqx, key: eqx.nn.Pool(init, getattr(lax, operation_name), 2, 2)  # noqa: E731
    return eqx_factory(build, wrap)


def _grad(module):
    return grad_of_squares(vmapped(module))


def _twice_vmapped(module):
    import jax

    return jax.vmap(jax.vmap(module))


F32_ONLY = ["f32"]  # ONNX Runtime has no float64 AveragePool (the *_f64 cases decompose)
_EDGES = np.array([1.0, np.nan, 3.0, -np.inf, -np.inf, 2.0, np.inf, -np.inf, 0.0, -0.0])
_EDGES = np.tile(_EDGES.reshape(1, 1, 10), (2, 2, 1))

family.add_cases(
    max_pool_p,
    lambda: [
        case(
            "max_pool2d_vmapped",
            _layer("MaxPool2d", 2, stride=2),
            [("B", 3, 6, 6)],
            factory=True,
            expect=["MaxPool -> Where -> Where:Bx3x3x3"],
            counts={"MaxPool": 2, "Transpose": 0, "Reshape": 0, "Unsqueeze": 0},
        ),
        case(
            "max_pool1d_unbatched_padded",
            _layer("MaxPool1d", 3, stride=2, padding=1, wrap=None),
            [(2, 9)],
            factory=True,
            expect=["Unsqueeze -> MaxPool"],
        ),
        case(
            "max_pool1d_nan_inf",
            _layer("MaxPool1d", 2, padding=1),
            [_EDGES],
            factory=True,
            variants=["f32", "f64", "bf16", "f16"],
        ),
        case(
            "max_pool2d_ceil",
            _layer("MaxPool2d", 2, stride=2, use_ceil=True),
            [("B", 3, 5, 7)],
            factory=True,
            expect=["MaxPool -> Where -> Where:Bx3x3x4"],
        ),
        case(
            "max_pool3d_two_batch_axes",
            _layer("MaxPool3d", 2, stride=(1, 2, 2), wrap=_twice_vmapped),
            [("B", 2, 2, 3, 4, 4)],
            factory=True,
            expect=["Reshape -> MaxPool"],
        ),
        case(
            "max_pool1d_pad_equal_to_kernel",
            _layer("MaxPool1d", 2, padding=2),
            [("B", 2, 5)],
            factory=True,
            counts={"MaxPool": 0},
        ),
        case(
            "pool_generic_max",
            _generic_pool(-np.inf, "max"),
            [("B", 3, 5, 5)],
            factory=True,
            expect=["MaxPool -> Where -> Where:Bx3x4x4"],
        ),
        case(
            "pool_generic_min",
            _generic_pool(np.inf, "min"),  # not a max: Equinox's reduce_window, converted by lax
            [("B", 3, 5, 5)],
            factory=True,
        ),
        case(
            "adaptive_max_pool2d",
            _layer("AdaptiveMaxPool2d", (2, 3)),
            [("B", 3, 4, 6)],
            factory=True,
            expect=["MaxPool -> Where -> Where:Bx3x2x3"],
        ),
        case(
            "adaptive_max_pool1d_uneven",
            _layer("AdaptiveMaxPool1d", 4),
            [("B", 2, 10)],
            factory=True,
            counts={"MaxPool": 0},
        ),
        case("max_pool2d_grad", _layer("MaxPool2d", 2, wrap=_grad), [(2, 3, 5, 5)], factory=True),
    ],
)

family.add_cases(
    avg_pool_p,
    lambda: [
        case(
            "avg_pool2d_padded",
            _layer("AvgPool2d", 3, padding=1),
            [("B", 3, 6, 5)],
            factory=True,
            expect=["AveragePool:Bx3x6x5"],
            counts={"AveragePool": 1, "Div": 0, "Transpose": 0, "Reshape": 0},
            variants=["f32", "bf16", "f16"],
        ),
        case(
            "avg_pool2d_padded_f64",
            _layer("AvgPool2d", 3, padding=1),
            [("B", 3, 6, 5)],
            factory=True,
            counts={"AveragePool": 0},
            variants=["f64"],
        ),
        case(
            "avg_pool1d_ceil",
            _layer("AvgPool1d", 2, stride=2, use_ceil=True),
            [("B", 2, 7)],
            factory=True,
            expect=["AveragePool:Bx2x4"],
            variants=F32_ONLY,
        ),
        case(
            "avg_pool3d_unbatched",
            _layer("AvgPool3d", (2, 1, 2), stride=(2, 1, 1), wrap=None),
            [(2, 4, 3, 3)],
            factory=True,
            expect=["Unsqueeze -> AveragePool -> Squeeze:2x2x3x2"],
            variants=F32_ONLY,
        ),
        case(
            "adaptive_avg_pool2d",
            _layer("AdaptiveAvgPool2d", (2, 3)),
            [("B", 3, 4, 6)],
            factory=True,
            expect=["AveragePool:Bx3x2x3"],
            variants=F32_ONLY,
        ),
        case(
            "adaptive_avg_pool2d_global",
            _layer("AdaptiveAvgPool2d", 1),
            [("B", 3, 5, 4)],
            factory=True,
            expect=["GlobalAveragePool:Bx3x1x1"],
            variants=F32_ONLY,
        ),
        case(
            "adaptive_avg_pool1d_uneven",
            _layer("AdaptiveAvgPool1d", 3),
            [("B", 2, 7)],
            factory=True,
            counts={"AveragePool": 0},
        ),
        case("avg_pool2d_grad", _layer("AvgPool2d", 2, wrap=_grad), [(2, 3, 5, 5)], factory=True),
    ],
)
