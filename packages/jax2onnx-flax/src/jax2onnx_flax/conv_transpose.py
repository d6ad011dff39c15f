"""Flax NNX ``ConvTranspose`` as the macro primitive ``flax.conv_transpose``.

See :mod:`jax2onnx_flax.conv` for the common approach (conversion-time kernel
preparation, flax's batch flattening, one Transpose in and one out, explicit
batching by merging the vmapped axis into the batch axis). ``transpose_kernel=True``
kernels are flipped and channel-swapped at conversion time, so the primitive
always computes ``lax.conv_transpose`` of a kernel as stored. ``CIRCULAR`` is the
VALID transposed convolution followed by flax's wrap-around sum (Pad, Reshape,
ReduceSum) and the bias Add.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, at_conversion, case
from jax2onnx_flax._util import F32, grad_of_squares, hashable_precision, module_factory, promoted
from jax2onnx_flax.conv import (
    F32_ONLY,
    TRANSPOSE_IN_AND_OUT,
    add_bias,
    broadcast_tuple,
    flat_batch,
    merged_batch,
    to_nchw,
    to_nhwc,
)
from jax2onnx_lax.blocks import conv_transpose_kernel

family = Family("flax")
register = family.register

# -- nnx.ConvTranspose -----------------------------------------------------------


def _transpose_padding(eff: int, stride: int, padding: str) -> tuple[int, int]:
    """The padding ``lax.conv_transpose`` gives the lhs-dilated input for SAME/VALID."""
    if padding == "SAME":
        total = eff + stride - 2
        lo = eff - 1 if stride > eff - 1 else -(-total // 2)
    else:
        total = eff + stride - 2 + max(eff - stride, 0)
        lo = eff - 1
    return lo, total - lo


def _conv_transpose(x, kernel, *bias, strides, padding, kernel_dilation, precision):
    y = lax.conv_transpose(
        x, kernel, strides, padding, rhs_dilation=kernel_dilation, precision=precision
    )
    return add_bias(y, bias)


conv_transpose_p = family.primitive(
    "conv_transpose",
    impl=_conv_transpose,
    batching=merged_batch(lambda: conv_transpose_p, _conv_transpose),
    jvp="fallback",
)


def _circular_fold(y, x_spatial, strides, transpose_kernel):
    """flax's CIRCULAR ConvTranspose: the VALID output wrapped onto ``input * stride``."""
    scaled = [d * s for d, s in zip(x_spatial, strides)]
    diffs = [-(yd - sd) % (2 * sd) for yd, sd in zip(y.shape[1:-1], scaled)]
    if transpose_kernel:
        pads = [(d // 2, (d + 1) // 2) for d in diffs]
    else:
        pads = [((d + 1) // 2, d // 2) for d in diffs]
    y = jnp.pad(y, [(0, 0), *pads, (0, 0)])
    for i in range(1, y.ndim - 1):
        y = y.reshape(y.shape[:i] + (-1, scaled[i - 1]) + y.shape[i + 1 :])
        y = y.sum(axis=i)
    return y


def transposed_kernel(kernel, n):
    """What ``lax.conv_transpose(transpose_kernel=True)`` does to the kernel (``n`` spatial
    axes flipped, the channel axes swapped), done now on the stored array."""
    return at_conversion(lambda k: jnp.swapaxes(jnp.flip(k, tuple(range(n))), n, n + 1), kernel)


def _conv_transpose_binder(original):
    from flax.nnx.nn.linear import canonicalize_padding

    @functools.wraps(original)
    def call(self, inputs):
        n = len(self.kernel_size)
        padding = canonicalize_padding(self.padding, n)
        if (
            self.preferred_element_type is not None
            or (isinstance(padding, str) and padding not in ("SAME", "VALID", "CIRCULAR"))
            or (self.mask is not None and self.mask.shape != self.kernel_shape)
            or not 1 <= n <= 3
        ):
            return original(self, inputs)
        kernel = self.kernel[...]
        if self.mask is not None:
            kernel = at_conversion(jnp.multiply, kernel, self.mask)
        bias = self.bias[...] if self.bias is not None else None
        x, kernel, bias = promoted(self, (inputs, kernel, bias))
        if self.transpose_kernel:
            kernel = transposed_kernel(kernel, n)
        circular = padding == "CIRCULAR"
        strides = broadcast_tuple(self.strides, n)
        params = dict(
            strides=strides,
            padding="VALID"
            if circular
            else (padding if isinstance(padding, str) else tuple(map(tuple, padding))),
            kernel_dilation=broadcast_tuple(self.kernel_dilation, n),
            precision=hashable_precision(self.precision),
        )
        fused_bias = () if bias is None or circular else (bias,)

        def bind(flat):
            y = conv_transpose_p.bind(flat, kernel, *fused_bias, **params)
            if circular:
                y = _circular_fold(y, flat.shape[1:-1], strides, self.transpose_kernel)
                if bias is not None:
                    y = add_bias(y, (bias,))
            return y

        return flat_batch(x, n, bind)

    return call


family.intercept("flax.nnx.ConvTranspose.__call__", conv_transpose_p, binder=_conv_transpose_binder)


def _conv_t_model(*args, wrap=None, **kwargs):
    return module_factory(lambda nnx: nnx.ConvTranspose(*args, rngs=nnx.Rngs(0), **kwargs), wrap)


family.add_cases(
    conv_transpose_p,
    lambda: [
        case(
            "conv_transpose_same_strided",
            _conv_t_model(3, 4, (3, 3), strides=2),
            [("B", 5, 5, 3)],
            factory=True,
            expect=["Transpose -> ConvTranspose -> Transpose:Bx10x10x4"],
            counts={**TRANSPOSE_IN_AND_OUT, "Add": 0, "Conv": 0},
            variants=["f32", "bf16"],  # bfloat16 inputs promote to the float32 kernel
        ),
        case(
            "conv_transpose_dtype_bfloat16",
            _conv_t_model(3, 4, (3, 3), strides=2, dtype=jnp.bfloat16),
            [("B", 5, 5, 3)],
            factory=True,
            expect=["ConvTranspose -> Cast -> Transpose:Bx10x10x4"],
            variants=["bf16"],
        ),
        case(
            "conv_transpose_same_f64",
            _conv_t_model(3, 4, (3, 3), strides=2),
            [("B", 5, 5, 3)],
            factory=True,
            counts={"ConvTranspose": 0},
            variants=["f64"],
        ),
        case(
            "conv_transpose_valid",
            _conv_t_model(2, 3, (3, 2), strides=(2, 3), padding="VALID"),
            [("B", 4, 5, 2)],
            factory=True,
            expect=["Transpose -> ConvTranspose -> Transpose"],
            counts=TRANSPOSE_IN_AND_OUT,
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose_stride_beyond_kernel",
            _conv_t_model(2, 3, 2, strides=3, use_bias=False),
            [("B", 4, 2)],
            factory=True,
            expect=["Transpose -> ConvTranspose -> Transpose"],
            counts=TRANSPOSE_IN_AND_OUT,
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose_explicit_pads",
            _conv_t_model(2, 3, (3, 3), strides=2, padding=((1, 2), (0, 1))),
            [("B", 4, 5, 2)],
            factory=True,
            expect=["ConvTranspose"],
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose_wide_pads",
            _conv_t_model(2, 3, (2, 2), strides=1, padding=((3, 0), (-1, 2))),
            [("B", 4, 5, 2)],
            factory=True,
        ),
        case(
            "conv_transpose_kernel_dilation_3d",
            _conv_t_model(2, 2, (2, 2, 2), strides=(1, 2, 1), kernel_dilation=(2, 1, 1)),
            [("B", 3, 4, 3, 2)],
            factory=True,
            expect=["ConvTranspose"],
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose_transpose_kernel",
            _conv_t_model(3, 2, (3, 2), strides=2, transpose_kernel=True),
            [("B", 4, 5, 3)],
            factory=True,
            variants=F32_ONLY,
            expect=["Transpose -> ConvTranspose -> Transpose"],
            counts={**TRANSPOSE_IN_AND_OUT, "Slice": 0},
        ),
        case(
            "conv_transpose_circular",
            _conv_t_model(2, 3, (3, 3), strides=2, padding="CIRCULAR"),
            [("B", 4, 5, 2)],
            factory=True,
            variants=F32_ONLY,
            expect=["ConvTranspose"],
        ),
        case(
            "conv_transpose_mask_1d",
            _conv_t_model(2, 3, 3, strides=2, mask=np.tril(np.ones((3, 2, 3), np.float32))),
            [("B", 6, 2)],
            factory=True,
            variants=F32_ONLY,
            expect=["ConvTranspose"],
            counts={"Mul": 0},
        ),
        case(
            "conv_transpose_vmap",
            _conv_t_model(2, 3, (3, 3), strides=2, wrap=jax.vmap),
            [("B", 2, 4, 4, 2)],
            factory=True,
            counts={"ConvTranspose": 1},
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose_grad",
            _conv_t_model(2, 3, (3, 3), strides=2, wrap=grad_of_squares),
            [(2, 4, 4, 2)],
            factory=True,
        ),
    ],
)


@family.lowering(conv_transpose_p, native_dtypes=(F32,))  # ONNX Runtime: float32 only
def conv_transpose(ctx, x, kernel, *bias, strides, padding, kernel_dilation, precision):
    """Transpose -> ConvTranspose(flipped (in, out, k...) kernel, B = bias) -> Transpose.

    ``lax.conv_transpose`` is a convolution of the stride-dilated input with the
    kernel as stored, padded by ``(lo, hi)``; ONNX ConvTranspose with the
    spatially flipped, in/out-swapped kernel computes the same with
    ``pads = eff - 1 - lo`` and, where ``hi`` exceeds ``eff - 1``, that much
    ``output_padding`` (zeros past the full convolution, as in lax).
    """
    k_aval = ctx.avals_in[1]
    n = k_aval.ndim - 2
    kernel_size = [int(k) for k in k_aval.shape[:n]]
    eff = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
    if isinstance(padding, str):
        pairs = [_transpose_padding(e, s, padding) for e, s in zip(eff, strides)]
    else:
        pairs = [(int(lo), int(hi)) for lo, hi in padding]
    begin = [e - 1 - lo for e, (lo, _) in zip(eff, pairs)]
    end = [max(e - 1 - hi, 0) for e, (_, hi) in zip(eff, pairs)]
    extra = [max(hi - (e - 1), 0) for e, (_, hi) in zip(eff, pairs)]
    too_wide = any(o >= max(s, d) for o, s, d in zip(extra, strides, kernel_dilation))
    if too_wide or any(b < 0 for b in begin):
        return ctx.fallback()
    kshape = [k_aval.shape[n + 1], k_aval.shape[n], *kernel_size]
    weight = conv_transpose_kernel(ctx, ctx.transpose(kernel, [n + 1, n, *range(n)]), kshape, 1)
    y = ctx.op.ConvTranspose(
        to_nchw(ctx, x, n),
        weight,
        *bias,
        kernel_shape=kernel_size,
        strides=list(strides),
        dilations=list(kernel_dilation),
        pads=begin + end,
        output_padding=extra if any(extra) else None,
    )
    return to_nhwc(ctx, y, n)
