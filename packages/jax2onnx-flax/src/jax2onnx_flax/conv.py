"""Flax NNX ``Conv`` as the macro primitive ``flax.conv`` (ConvTranspose: conv_transpose.py).

The stand-in does at conversion time what touches only the module's arrays
(``kernel * mask``, flax's ``promote_dtype``), flattens extra batch dimensions
as flax does, and binds one primitive on ``(x, kernel[, bias])`` in flax's
channels-last layout.

The lowering emits one ``Conv`` in ONNX's channels-first layout: one Transpose
in, one out (the core's FoldTransposesPass cancels the pair between two
consecutive convolutions); the kernel is permuted once at conversion time and
the bias is the op's ``B`` input. Padding: ``SAME``/``VALID``/explicit pairs
and ``CAUSAL`` are the op's ``pads`` (``auto_pad`` for SAME over symbolic
spatial sizes); ``REFLECT`` and ``CIRCULAR`` are a ``Pad`` (mode ``reflect``,
or ``wrap`` at opset >= 19) before a VALID Conv. What ONNX Runtime cannot
compute with one op (float64 and other non-float32 dtypes, input dilation,
negative padding, CIRCULAR below opset 19) inlines JAX's own computation, which
the lax conv lowering converts exactly.

Batching is explicit: the vmapped axis merges into the batch axis (a Reshape),
the same primitive binds once, and the result splits again. JVPs are JAX's
derivative of ``impl``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, at_conversion, case, is_symbolic
from jax2onnx_flax._util import F32, grad_of_squares, hashable_precision, module_factory, promoted

family = Family("flax")
register = family.register
_PAD_MODES = {"CIRCULAR": "wrap", "REFLECT": "reflect"}


def broadcast_tuple(value: Any, n: int) -> tuple[int, ...]:
    """flax's ``maybe_broadcast``: None -> 1, an int -> n copies."""
    if value is None:
        value = 1
    if isinstance(value, int):
        return (value,) * n
    return tuple(int(v) for v in value)


def _dimension_numbers(ndim: int) -> lax.ConvDimensionNumbers:
    """Channels-last input and output, (spatial..., in, out) kernel (flax's layout)."""
    lhs = (0, ndim - 1, *range(1, ndim - 1))
    rhs = (ndim - 1, ndim - 2, *range(ndim - 2))
    return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def add_bias(y, bias):
    return y + bias[0].reshape((1,) * (y.ndim - 1) + (-1,)) if bias else y


def flat_batch(x, n_spatial, bind):
    """``bind(x)`` with leading batch dims flattened to one (or one added), as flax does."""
    batch_dims = x.ndim - (n_spatial + 1)
    if batch_dims == 1:
        return bind(x)
    batch_shape = x.shape[:batch_dims]
    y = bind(jnp.reshape(x, (-1, *x.shape[batch_dims:])))
    return jnp.reshape(y, batch_shape + y.shape[1:])


def merged_batch(primitive, impl):
    """Batching rule: the vmapped axis of ``x`` merges into its batch axis, one bind.

    ``primitive()`` returns the primitive (created after its rule).
    """

    def rule(args, dims, **params):
        prim = primitive()
        if dims[0] is None or any(d is not None for d in dims[1:]):
            out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims))(*args)
            return out, 0
        x = jnp.moveaxis(args[0], dims[0], 0)
        size, batch = x.shape[0], x.shape[1]
        y = prim.bind(jnp.reshape(x, (-1, *x.shape[2:])), *args[1:], **params)
        return jnp.reshape(y, (size, batch, *y.shape[1:])), 0

    return rule


def to_nchw(ctx, x, n):
    return ctx.op.Transpose(x, perm=[0, n + 1, *range(1, n + 1)])


def to_nhwc(ctx, y, n):
    return ctx.op.Transpose(y, perm=[0, *range(2, n + 2), 1])


# -- nnx.Conv --------------------------------------------------------------------


def _conv(x, kernel, *bias, strides, padding, input_dilation, kernel_dilation, groups, precision):
    n = kernel.ndim - 2
    if padding in _PAD_MODES:
        eff = [(k - 1) * d + 1 for k, d in zip(kernel.shape[:n], kernel_dilation)]
        pads = [(0, 0), *(((k - 1) // 2, k // 2) for k in eff), (0, 0)]
        x = jnp.pad(x, pads, mode=_PAD_MODES[padding])
        padding = "VALID"
    elif padding == "CAUSAL":
        x = jnp.pad(x, [(0, 0), (kernel_dilation[0] * (kernel.shape[0] - 1), 0), (0, 0)])
        padding = "VALID"
    y = lax.conv_general_dilated(
        x,
        kernel,
        strides,
        padding,
        lhs_dilation=input_dilation,
        rhs_dilation=kernel_dilation,
        dimension_numbers=_dimension_numbers(x.ndim),
        feature_group_count=groups,
        precision=precision,
    )
    return add_bias(y, bias)


conv_p = family.primitive(
    "conv", impl=_conv, batching=merged_batch(lambda: conv_p, _conv), jvp="fallback"
)


def _conv_binder(original):
    from flax.nnx.nn.linear import canonicalize_padding

    @functools.wraps(original)
    def call(self, inputs, out_sharding=None):
        n = len(self.kernel_size)
        padding = canonicalize_padding(self.padding, n)
        if (
            out_sharding is not None
            or self.preferred_element_type is not None
            or self.conv_general_dilated is not lax.conv_general_dilated
            or (padding == "CAUSAL" and n != 1)
            or (self.mask is not None and self.mask.shape != self.kernel_shape)
            or self.in_features % self.feature_group_count
        ):
            return original(self, inputs, out_sharding=out_sharding)
        kernel = self.kernel[...]
        if self.mask is not None:
            kernel = at_conversion(jnp.multiply, kernel, self.mask)
        bias = self.bias[...] if self.bias is not None else None
        x, kernel, bias = promoted(self, (inputs, kernel, bias))
        params = dict(
            strides=broadcast_tuple(self.strides, n),
            padding=padding if isinstance(padding, str) else tuple(map(tuple, padding)),
            input_dilation=broadcast_tuple(self.input_dilation, n),
            kernel_dilation=broadcast_tuple(self.kernel_dilation, n),
            groups=self.feature_group_count,
            precision=hashable_precision(self.precision),
        )
        rest = (kernel,) if bias is None else (kernel, bias)
        return flat_batch(x, n, lambda flat: conv_p.bind(flat, *rest, **params))

    return call


family.intercept("flax.nnx.Conv.__call__", conv_p, binder=_conv_binder)


def _conv_pads(ctx, padding, spatial, eff, strides):
    """(pads attribute, auto_pad attribute) of the Conv, or None when it cannot say it."""
    n = len(eff)
    if padding in _PAD_MODES or padding == "VALID":
        return [0] * 2 * n, None
    if padding == "CAUSAL":
        return [eff[0] - 1, 0], None
    if isinstance(padding, str):
        if any(is_symbolic(d) for d in spatial):
            auto = {"SAME": "SAME_UPPER", "SAME_LOWER": "SAME_LOWER"}.get(padding)
            return (None, auto) if auto else None
        padding = lax.padtype_to_pads(tuple(int(d) for d in spatial), eff, strides, padding)
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        return None
    return [int(lo) for lo, _ in padding] + [int(hi) for _, hi in padding], None


def _conv_model(*args, wrap=None, **kwargs):
    return module_factory(lambda nnx: nnx.Conv(*args, rngs=nnx.Rngs(0), **kwargs), wrap)


F32_ONLY = ["f32"]  # cases showing the ONNX op: ORT has no float64 Conv (the *_f64 cases decompose)
TRANSPOSE_IN_AND_OUT = {"Transpose": 2}

family.add_cases(
    conv_p,
    lambda: [
        case(
            "conv_2d_same",
            _conv_model(3, 4, (3, 3)),
            [("B", 8, 8, 3)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose:Bx8x8x4"],
            counts={**TRANSPOSE_IN_AND_OUT, "Add": 0, "Pad": 0},
            variants=["f32", "bf16", "f16"],  # half inputs promote to the float32 kernel
        ),
        case(
            # computes in bfloat16 (dtype) with float32 parameters (param_dtype)
            "conv_2d_dtype_bfloat16",
            _conv_model(3, 4, (3, 3), dtype=jnp.bfloat16),
            [("B", 8, 8, 3)],
            factory=True,
            expect=["Conv -> Cast -> Transpose:Bx8x8x4"],
            variants=["bf16"],
        ),
        case(
            "conv_2d_same_f64",
            _conv_model(3, 4, (3, 3)),
            [("B", 8, 8, 3)],
            factory=True,
            counts={"Conv": 0},
            variants=["f64"],
        ),
        case(
            "conv_1d_valid_strided_no_bias",
            _conv_model(2, 3, 3, strides=2, padding="VALID", use_bias=False),
            [("B", 9, 2)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose:Bx4x3"],
            counts=TRANSPOSE_IN_AND_OUT,
            variants=F32_ONLY,
        ),
        case(
            "conv_3d_explicit_pads",
            _conv_model(2, 3, (2, 3, 2), padding=((1, 0), (2, 1), 1)),
            [("B", 4, 5, 3, 2)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose"],
            counts=TRANSPOSE_IN_AND_OUT,
            variants=F32_ONLY,
        ),
        case(
            "conv_3d_f64",
            _conv_model(2, 3, (2, 3, 2), strides=(1, 2, 1), padding=((1, 0), (2, 1), 1)),
            [(2, 4, 5, 3, 2)],
            factory=True,
            variants=["f64"],
        ),
        case(
            "conv_dilated_grouped",
            _conv_model(4, 6, (3, 3), kernel_dilation=2, feature_group_count=2),
            [("B", 9, 9, 4)],
            factory=True,
            variants=F32_ONLY,
            expect=["Transpose -> Conv -> Transpose:Bx9x9x6"],
            counts=TRANSPOSE_IN_AND_OUT,
        ),
        case(
            "conv_grouped_f64",
            _conv_model(4, 6, (3, 2), kernel_dilation=(2, 1), feature_group_count=2),
            [("B", 7, 5, 4)],
            factory=True,
            counts={"Conv": 0},
            variants=["f64"],
        ),
        case(
            "conv_reflect_grad_f64",
            _conv_model(2, 3, (3, 3), padding="REFLECT", wrap=grad_of_squares),
            [(2, 5, 6, 2)],
            factory=True,
            variants=["f64"],
        ),
        case(
            "conv_depthwise_strided",
            _conv_model(3, 6, (3, 3), strides=(2, 1), feature_group_count=3),
            [("B", 7, 6, 3)],
            factory=True,
            variants=F32_ONLY,
            expect=["Conv"],
        ),
        case(
            "conv_circular",
            _conv_model(2, 3, (3, 4), padding="CIRCULAR"),
            [("B", 6, 7, 2)],
            factory=True,
            expect=["Transpose -> Pad -> Conv -> Transpose:Bx6x7x3"],
            counts=TRANSPOSE_IN_AND_OUT,
            opset=19,
            variants=F32_ONLY,
        ),
        case(
            "conv_circular_opset18",
            _conv_model(2, 3, (3, 4), padding="CIRCULAR"),
            [("B", 6, 7, 2)],
            factory=True,
            opset=18,
        ),
        case(
            "conv_reflect_dilated",
            _conv_model(2, 3, (3, 2), padding="REFLECT", kernel_dilation=(1, 2)),
            [("B", 6, 7, 2)],
            factory=True,
            expect=["Transpose -> Pad -> Conv -> Transpose:Bx6x7x3"],
            counts=TRANSPOSE_IN_AND_OUT,
            variants=F32_ONLY,
        ),
        case(
            "conv_causal",
            _conv_model(2, 3, 3, padding="CAUSAL", kernel_dilation=2),
            [("B", 10, 2)],
            factory=True,
            variants=F32_ONLY,
            expect=["Transpose -> Conv -> Transpose:Bx10x3"],
            counts={**TRANSPOSE_IN_AND_OUT, "Pad": 0},
        ),
        case(
            "conv_input_dilation",
            _conv_model(2, 3, (3, 3), input_dilation=2, padding=((1, 1), (0, 2))),
            [("B", 4, 5, 2)],
            factory=True,
        ),
        case(
            "conv_mask",
            _conv_model(2, 3, (3, 3), mask=np.tril(np.ones((3, 3, 2, 3), np.float32), -1)),
            [("B", 5, 5, 2)],
            factory=True,
            variants=F32_ONLY,
            expect=["Transpose -> Conv -> Transpose"],
            counts={**TRANSPOSE_IN_AND_OUT, "Mul": 0},
        ),
        case(
            "conv_symbolic_spatial",
            _conv_model(2, 3, 3, strides=2),
            [("B", "T", 2)],
            factory=True,
            expect=["Conv"],
            dim_sizes={"B": (3, 2, 5), "T": (9, 4, 7)},
            variants=F32_ONLY,
        ),
        case(
            "conv_unbatched",
            _conv_model(2, 3, (3, 3)),
            [(5, 5, 2)],
            factory=True,
        ),
        case(
            "conv_two_batch_dims",
            _conv_model(2, 3, (3,)),
            [("B", 2, 6, 2)],
            factory=True,
            expect=["Conv"],
            variants=F32_ONLY,
        ),
        case(
            "conv_vmap",
            _conv_model(2, 3, (3, 3), wrap=jax.vmap),
            [("B", 2, 5, 5, 2)],
            factory=True,
            expect=["Conv"],
            counts={"Conv": 1},
            variants=F32_ONLY,
        ),
        case(
            "conv_grad",
            _conv_model(2, 3, (3, 3), strides=2, wrap=grad_of_squares),
            [(2, 6, 6, 2)],
            factory=True,
        ),
    ],
)


@family.lowering(conv_p, native_dtypes=(F32,))  # ONNX Runtime has no float64 Conv
def conv(
    ctx, x, kernel, *bias, strides, padding, input_dilation, kernel_dilation, groups, precision
):
    """Transpose -> [Pad] -> Conv(kernel permuted at conversion, B = bias) -> Transpose."""
    x_aval, k_aval = ctx.avals_in[:2]
    n = k_aval.ndim - 2
    kernel_size = [int(k) for k in k_aval.shape[:n]]
    eff = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
    spatial = x_aval.shape[1 : n + 1]
    pads = _conv_pads(ctx, padding, spatial, eff, strides)
    if (
        any(d != 1 for d in input_dilation)
        or pads is None
        or (padding == "CIRCULAR" and ctx.opset < 19)
    ):
        return ctx.fallback()
    xt = to_nchw(ctx, x, n)
    if padding in _PAD_MODES:
        lo = [(k - 1) // 2 for k in eff]
        hi = [k // 2 for k in eff]
        xt = ctx.op.Pad(xt, ctx.i64([0, 0, *lo, 0, 0, *hi]), mode=_PAD_MODES[padding])
    conv_pads, auto_pad = pads
    y = ctx.op.Conv(
        xt,
        ctx.transpose(kernel, [n + 1, n, *range(n)]),
        *bias,
        kernel_shape=kernel_size,
        strides=list(strides),
        dilations=list(kernel_dilation),
        pads=conv_pads,
        auto_pad=auto_pad,
        group=groups,
    )
    return to_nhwc(ctx, y, n)


# -- a stack: the Transposes between consecutive convolutions cancel --------------


def _conv_stack(nnx):
    return nnx.Sequential(
        nnx.Conv(2, 4, (3, 3), rngs=nnx.Rngs(0)),
        nnx.Conv(4, 3, (3, 3), strides=2, rngs=nnx.Rngs(1)),
    )


def _conv_relu_stack(nnx):
    return nnx.Sequential(
        nnx.Conv(2, 4, (3, 3), rngs=nnx.Rngs(0)),
        nnx.relu,
        nnx.Conv(4, 3, (3, 3), rngs=nnx.Rngs(1)),
    )


family.add_cases(
    conv_p,
    lambda: [
        case(
            "conv_stack",
            module_factory(_conv_stack),
            [("B", 8, 8, 2)],
            factory=True,
            expect=["Transpose -> Conv -> Conv -> Transpose:Bx4x4x3"],
            counts={"Transpose": 2},
            variants=F32_ONLY,
        ),
        case(
            "conv_relu_stack",
            module_factory(_conv_relu_stack),
            [("B", 8, 8, 2)],
            factory=True,
            # nnx.Sequential stored jax.nn.relu before to_onnx patched it, so the
            # activation arrives as its definition, max(x, 0); the layout Transposes
            # still sink through it and cancel.
            expect=["Transpose -> Conv -> Max -> Conv -> Transpose:Bx8x8x3"],
            counts={"Transpose": 2},
            variants=F32_ONLY,
        ),
    ],
)
