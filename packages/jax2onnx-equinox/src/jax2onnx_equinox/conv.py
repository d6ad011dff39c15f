"""``eqx.nn.Conv`` and ``eqx.nn.ConvTranspose`` (and their 1d/2d/3d forms) as macro primitives.

Equinox convolves one example ``(channels, spatial...)`` with a weight stored
``(out, in / groups, kernel...)``: channels-first, ONNX's own layout, so no
Transpose is ever needed. The primitives take ``x`` with any number of leading
batch axes (none for a single example); the batching rule moves the vmapped
axis of ``x`` to the front and binds again, so a ``jax.vmap`` of the layer is
one ``Conv``/``ConvTranspose`` whose N is the vmapped batch. The lowerings add
N with ``Unsqueeze``/``Squeeze`` for a single example and merge several batch
axes with a ``Reshape``. A vmap over the weights too is JAX's vmap of the
arithmetic, which the lax rules lower.

- ``Conv``: padding ints, pairs and ``"VALID"`` are the op's ``pads``;
  ``"SAME"``/``"SAME_LOWER"`` are ``pads`` for static spatial sizes and
  ``auto_pad`` (``SAME_UPPER``/``SAME_LOWER``, the same split) for symbolic
  ones. ``padding_mode`` ``REFLECT``/``REPLICATE``/``CIRCULAR`` is a ``Pad``
  (mode ``reflect``/``edge``/``wrap``) before a VALID Conv, as Equinox pads.
- ``ConvTranspose``: Equinox computes a convolution of the stride-dilated input
  with the stored weight, padded by its ``padding_t``. ONNX ``ConvTranspose``
  with the weight flipped and regrouped to ``(in, out / groups, kernel...)``
  (at conversion time, :func:`jax2onnx_lax.blocks.conv_transpose_kernel`)
  computes the same with ``pads = eff - 1 - lo`` and, where ``hi`` passes
  ``eff - 1`` (Equinox's ``output_padding``), that much ``output_padding``.
  ``CIRCULAR`` wraps the input with a ``Pad`` first, as Equinox does.

What one ONNX Runtime op cannot compute (float64: ONNX Runtime has no float64
Conv/ConvTranspose; negative pads; ``wrap`` below opset 19; reflect/wrap pads
the input cannot supply; symbolic sizes a rule must know) inlines Equinox's
arithmetic, which the lax conv rules convert exactly. JVPs are JAX's
derivative of that arithmetic. Inputs whose dtype differs from the weight's
run Equinox's own call (which refuses them, as it does outside ``to_onnx``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, at_conversion, case, is_symbolic, kernel_dtypes
from jax2onnx_equinox._util import eqx_factory, grad_of_squares, vmapped
from jax2onnx_lax.blocks import conv_transpose_kernel

family = Family("equinox")
register = family.register

PAD_MODES = {"REFLECT": "reflect", "REPLICATE": "edge", "CIRCULAR": "wrap"}


# -- shared: leading batch axes, pre-padding, the batching rule -------------------


def as_one_batch(x, n, compute):
    """``compute`` on ``x`` with its leading batch axes merged into one (or one added)."""
    lead = x.shape[: x.ndim - n - 1]
    y = compute(jnp.reshape(x, (-1, *x.shape[len(lead) :])))
    return jnp.reshape(y, (*lead, *y.shape[1:]))


def front_batched(get_prim):
    """Batching rule: only ``x`` batched -> the vmapped axis leads, the same primitive binds."""

    def rule(args, dims, **params):
        prim = get_prim()
        if dims[0] is None or any(d is not None for d in dims[1:]):
            impl = functools.partial(prim.impl, **params)
            return jax.vmap(impl, in_axes=tuple(dims))(*args), 0
        x = jnp.moveaxis(args[0], dims[0], 0)
        return prim.bind(x, *args[1:], **params), 0

    return rule


def in_nc_layout(ctx, x, n, op):
    """``op`` applied to ``x`` (``(batch..., C, spatial...)``) as ``(N, C, spatial...)``.

    A single example gets ``N = 1`` (Unsqueeze/Squeeze), one batch axis is N,
    several merge into N (Reshape) and split again.
    """
    shape, out_shape = ctx.avals_in[0].shape, ctx.avals_out[0].shape
    nb = len(shape) - n - 1
    if nb == 1:
        return op(x)
    if nb == 0:
        return ctx.op.Squeeze(op(ctx.op.Unsqueeze(x, ctx.i64([0]))), ctx.i64([0]))
    y = op(ctx.op.Reshape(x, ctx.shape([-1, *shape[nb:]])))
    return ctx.op.Reshape(y, ctx.shape(out_shape))


def _pad_indices(size, lo, hi, pad_mode):
    """The source index of every position of one spatial axis padded as ``jnp.pad`` does."""
    idx = np.arange(-lo, size + hi)
    if pad_mode == "edge":
        return np.clip(idx, 0, size - 1)
    if pad_mode == "wrap":
        return idx % size
    period = max(2 * size - 2, 1)  # "reflect": mirrored about the end elements
    folded = idx % period
    return np.where(folded >= size, period - folded, folded)


def _pre_pad(x, pre_pad, pad_mode):
    """Equinox's ``jnp.pad`` of the spatial axes, as one gather per padded axis.

    (``jnp.pad`` also slices the unpadded batch and channel axes; gathering
    static indices computes the same values with fewer equations.)
    """
    if pre_pad is None:
        return x
    if any(is_symbolic(d) for d in x.shape[2:]):
        return jnp.pad(x, [(0, 0), (0, 0), *pre_pad], mode=pad_mode)
    for axis, (lo, hi) in enumerate(pre_pad, start=2):
        if lo or hi:
            idx = _pad_indices(int(x.shape[axis]), lo, hi, pad_mode)
            x = jnp.take(x, idx, axis=axis, mode="clip")
    return x


def _add_bias(y, bias, n):
    return y + jnp.reshape(bias[0], (-1,) + (1,) * n) if bias else y


def _onnx_pre_pad(ctx, x, n, pre_pad, pad_mode):
    """The ``Pad`` node of a non-zero padding mode, or None when ONNX cannot say it."""
    spatial = ctx.avals_in[0].shape[-n:]
    if pad_mode == "wrap" and ctx.opset < 19:
        return None
    if pad_mode != "edge":
        if any(is_symbolic(d) for d in spatial):
            return None
        limit = (lambda d: d - 1) if pad_mode == "reflect" else (lambda d: d)
        if any(max(p) > limit(int(d)) for p, d in zip(pre_pad, spatial)):
            return None
    lo = [int(a) for a, _ in pre_pad]
    hi = [int(b) for _, b in pre_pad]
    return ctx.op.Pad(x, ctx.i64([0, 0, *lo, 0, 0, *hi]), mode=pad_mode)


# -- eqx.nn.Conv ---------------------------------------------------------------


def _conv(x, weight, *bias, strides, padding, dilation, groups, pre_pad, pad_mode):
    n = weight.ndim - 2

    def compute(flat):
        return lax.conv_general_dilated(
            _pre_pad(flat, pre_pad, pad_mode),
            weight,
            strides,
            padding,
            rhs_dilation=dilation,
            feature_group_count=groups,
        )

    return _add_bias(as_one_batch(x, n, compute), bias, n)


conv_p = family.primitive(
    "eqx_conv", impl=_conv, batching=front_batched(lambda: conv_p), jvp="fallback"
)


def _flat_bias(module):
    if not module.use_bias or module.bias is None:
        return ()
    return (at_conversion(jnp.reshape, module.bias, (-1,)),)


def _conv_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        n = self.num_spatial_dims
        if not hasattr(x, "ndim") or x.ndim != n + 1 or x.dtype != self.weight.dtype:
            return original(self, x, key=key)  # Equinox's own behaviour (or error)
        padding, pre_pad, pad_mode = self.padding, None, None
        if self.padding_mode != "ZEROS":
            if isinstance(padding, str):
                try:
                    spatial = tuple(int(d) for d in x.shape[1:])
                except (TypeError, jax.errors.ConcretizationTypeError):
                    return original(self, x, key=key)  # symbolic sizes: Equinox's own pads
                eff = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, self.dilation)]
                padding = lax.padtype_to_pads(spatial, eff, self.stride, padding)
            pre_pad = tuple((int(lo), int(hi)) for lo, hi in padding)
            padding, pad_mode = "VALID", PAD_MODES[self.padding_mode]
        elif not isinstance(padding, str):
            padding = tuple((int(lo), int(hi)) for lo, hi in padding)
        return conv_p.bind(
            x,
            self.weight,
            *_flat_bias(self),
            strides=tuple(self.stride),
            padding=padding,
            dilation=tuple(self.dilation),
            groups=self.groups,
            pre_pad=pre_pad,
            pad_mode=pad_mode,
        )

    return call


family.intercept("equinox.nn.Conv.__call__", conv_p, binder=_conv_binder)


def _conv_pads(ctx, n, padding, eff, strides):
    """(pads, auto_pad) of the Conv over the (pre-padded) input, or None when ONNX cannot."""
    if padding == "VALID":
        return [0] * 2 * n, None
    if isinstance(padding, str):
        spatial = ctx.avals_in[0].shape[-n:]
        if any(is_symbolic(d) for d in spatial):
            return None, {"SAME": "SAME_UPPER", "SAME_LOWER": "SAME_LOWER"}[padding]
        padding = lax.padtype_to_pads(tuple(int(d) for d in spatial), eff, strides, padding)
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        return None
    return [int(lo) for lo, _ in padding] + [int(hi) for _, hi in padding], None


@family.lowering(conv_p, native_dtypes=kernel_dtypes("Conv"))
def conv(ctx, x, weight, *bias, strides, padding, dilation, groups, pre_pad, pad_mode):
    """[Pad ->] one Conv (weight as stored, B = bias) on the (N, C, spatial...) view."""
    kshape = ctx.avals_in[1].shape
    n = len(kshape) - 2
    eff = [(int(k) - 1) * d + 1 for k, d in zip(kshape[2:], dilation)]
    pads = _conv_pads(ctx, n, padding, eff, strides)
    if pads is None:
        return ctx.fallback()
    if pre_pad is not None:
        padded = _onnx_pre_pad(ctx, x, n, pre_pad, pad_mode)
        if padded is None:
            return ctx.fallback()
        x = padded

    def op(v):
        return ctx.op.Conv(
            v,
            weight,
            *bias,
            kernel_shape=[int(k) for k in kshape[2:]],
            strides=list(strides),
            dilations=list(dilation),
            pads=pads[0],
            auto_pad=pads[1],
            group=groups,
        )

    return in_nc_layout(ctx, x, n, op)


# -- eqx.nn.ConvTranspose -----------------------------------------------------------


def _conv_transpose(x, weight, *bias, strides, padding, dilation, groups, pre_pad):
    n = weight.ndim - 2

    def compute(flat):
        return lax.conv_general_dilated(
            _pre_pad(flat, pre_pad, "wrap"),
            weight,
            (1,) * n,
            padding,
            lhs_dilation=strides,
            rhs_dilation=dilation,
            feature_group_count=groups,
        )

    return _add_bias(as_one_batch(x, n, compute), bias, n)


conv_transpose_p = family.primitive(
    "eqx_conv_transpose",
    impl=_conv_transpose,
    batching=front_batched(lambda: conv_transpose_p),
    jvp="fallback",
)


def _conv_transpose_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        n = self.num_spatial_dims
        if not hasattr(x, "ndim") or x.ndim != n + 1 or x.dtype != self.weight.dtype:
            return original(self, x, key=key)
        padding = tuple((int(lo), int(hi)) for lo, hi in self._padding_transpose())
        pre_pad = None
        if self.padding_mode == "CIRCULAR":  # Equinox's _circular_pad, on static numbers
            pre_pad = tuple((lo // s, hi // s) for (lo, hi), s in zip(padding, self.stride))
            padding = tuple((lo % s, hi % s) for (lo, hi), s in zip(padding, self.stride))
        return conv_transpose_p.bind(
            x,
            self.weight,
            *_flat_bias(self),
            strides=tuple(self.stride),
            padding=padding,
            dilation=tuple(self.dilation),
            groups=self.groups,
            pre_pad=pre_pad,
        )

    return call


family.intercept(
    "equinox.nn.ConvTranspose.__call__", conv_transpose_p, binder=_conv_transpose_binder
)


@family.lowering(conv_transpose_p, native_dtypes=kernel_dtypes("ConvTranspose"))
def conv_transpose(ctx, x, weight, *bias, strides, padding, dilation, groups, pre_pad):
    """[Pad(wrap) ->] one ConvTranspose (weight flipped and regrouped at conversion time)."""
    kshape = [int(k) for k in ctx.avals_in[1].shape]
    n = len(kshape) - 2
    eff = [(k - 1) * d + 1 for k, d in zip(kshape[2:], dilation)]
    begin = [e - 1 - lo for e, (lo, _) in zip(eff, padding)]
    end = [max(e - 1 - hi, 0) for e, (_, hi) in zip(eff, padding)]
    extra = [max(hi - (e - 1), 0) for e, (_, hi) in zip(eff, padding)]
    too_wide = any(o >= max(s, d) for o, s, d in zip(extra, strides, dilation))
    if too_wide or any(b < 0 for b in begin):
        return ctx.fallback()
    if pre_pad is not None and any(pre_pad):
        padded = _onnx_pre_pad(ctx, x, n, pre_pad, "wrap")
        if padded is None:
            return ctx.fallback()
        x = padded

    def op(v):
        return ctx.op.ConvTranspose(
            v,
            conv_transpose_kernel(ctx, weight, kshape, groups),
            *bias,
            kernel_shape=kshape[2:],
            strides=list(strides),
            dilations=list(dilation),
            pads=begin + end,
            output_padding=extra if any(extra) else None,
            group=groups,
        )

    return in_nc_layout(ctx, x, n, op)


# -- cases ------------------------------------------------------------------------------


def at_input_dtype(wrap=vmapped):
    """``wrap(module)`` called with the module's float arrays in the input's dtype.

    Equinox's Conv refuses a float64 input with float32 weights; the float64
    variant of a case converts the module as a float64 user builds it.
    """

    def make(module):
        def fn(x):
            import equinox as eqx

            with jax.ensure_compile_time_eval():
                cast = jax.tree.map(
                    lambda a: a.astype(x.dtype) if eqx.is_inexact_array(a) else a, module
                )
            return (wrap(cast) if wrap is not None else cast)(x)

        return fn

    return make


def _model(cls, *args, wrap=vmapped, **kwargs):
    build = lambda eqx, key: getattr(eqx.nn, cls)(*args, key=key, **kwargs)  # noqa: E731
    return eqx_factory(build, at_input_dtype(wrap))


def _grad(module):
    return grad_of_squares(vmapped(module))


def _twice_vmapped(module):
    return jax.vmap(jax.vmap(module))


F32_ONLY = ["f32"]  # cases showing the ONNX op (ONNX Runtime has no float64 Conv)
NO_LAYOUT_OPS = {"Transpose": 0, "Reshape": 0, "Unsqueeze": 0, "Squeeze": 0}

family.add_cases(
    conv_p,
    lambda: [
        case(
            "conv2d_vmapped",
            _model("Conv2d", 3, 4, 3, padding=1),
            [("B", 3, 8, 8)],
            factory=True,
            expect=["Conv:Bx4x8x8"],
            counts={"Conv": 1, "Add": 0, **NO_LAYOUT_OPS},
            variants=["f32", "bf16", "f16"],  # the weights in the input's dtype
        ),
        case(
            "conv2d_reflect_f64",
            _model("Conv2d", 3, 4, 3, padding=1, padding_mode="REFLECT"),
            [("B", 3, 8, 8)],
            factory=True,
            counts={"Conv": 0},
            variants=["f64"],
        ),
        case(
            "conv2d_unbatched",
            _model("Conv2d", 2, 3, (3, 2), stride=(2, 1), wrap=None),
            [(2, 7, 6)],
            factory=True,
            expect=["Unsqueeze -> Conv -> Squeeze:3x3x5"],
            variants=F32_ONLY,
        ),
        case(
            "conv1d_same_dilated_no_bias",
            _model("Conv1d", 2, 3, 3, padding="SAME", dilation=2, use_bias=False),
            [("B", 2, 9)],
            factory=True,
            expect=["Conv:Bx3x9"],
            counts=NO_LAYOUT_OPS,
            variants=F32_ONLY,
        ),
        case(
            "conv1d_same_lower_symbolic",
            _model("Conv1d", 2, 3, 4, stride=2, padding="SAME_LOWER"),
            [("B", 2, "T")],
            factory=True,
            expect=["Conv"],
            dim_sizes={"B": (3, 2, 4), "T": (9, 6, 7)},
            variants=F32_ONLY,
        ),
        case(
            "conv3d_pairs_grouped",
            _model("Conv3d", 4, 6, (2, 3, 2), padding=((1, 0), (2, 1), (0, 1)), groups=2),
            [("B", 4, 3, 5, 4)],
            factory=True,
            expect=["Conv"],
            counts=NO_LAYOUT_OPS,
            variants=F32_ONLY,
        ),
        case(
            "conv_depthwise",
            _model("Conv", 2, 3, 6, 3, stride=2, groups=3),
            [("B", 3, 7, 6)],
            factory=True,
            expect=["Conv"],
            variants=F32_ONLY,
        ),
        case(
            "conv2d_reflect",
            _model("Conv2d", 2, 3, 3, padding=1, padding_mode="REFLECT"),
            [("B", 2, 6, 5)],
            factory=True,
            expect=["Pad -> Conv:Bx3x6x5"],
            counts=NO_LAYOUT_OPS,
            variants=F32_ONLY,
        ),
        case(
            "conv1d_replicate_same",
            _model("Conv1d", 2, 3, 4, padding="SAME", padding_mode="REPLICATE"),
            [("B", 2, 7)],
            factory=True,
            expect=["Pad -> Conv:Bx3x7"],
            variants=F32_ONLY,
        ),
        case(
            "conv2d_circular",
            _model("Conv2d", 2, 3, 3, padding=(1, 2), padding_mode="CIRCULAR"),
            [("B", 2, 5, 4)],
            factory=True,
            expect=["Pad -> Conv"],
            opset=19,
            variants=F32_ONLY,
        ),
        case(
            "conv2d_circular_opset18",
            _model("Conv2d", 2, 3, 3, padding=1, padding_mode="CIRCULAR"),
            [("B", 2, 5, 4)],
            factory=True,
            opset=18,
            counts={"Conv": 1},
            variants=F32_ONLY,
        ),
        case(
            "conv2d_two_batch_axes",
            _model("Conv2d", 2, 3, 3, wrap=_twice_vmapped),
            [("B", 2, 2, 5, 5)],
            factory=True,
            expect=["Reshape -> Conv -> Reshape:Bx2x3x3x3"],
            counts={"Conv": 1},
            variants=F32_ONLY,
        ),
        case(
            "conv2d_grad",
            _model("Conv2d", 2, 3, 3, stride=2, wrap=_grad),
            [(2, 2, 6, 6)],
            factory=True,
        ),
    ],
)

family.add_cases(
    conv_transpose_p,
    lambda: [
        case(
            "conv_transpose2d_vmapped",
            _model("ConvTranspose2d", 3, 4, 3, stride=2, padding=1, output_padding=1),
            [("B", 3, 5, 5)],
            factory=True,
            expect=["ConvTranspose:Bx4x10x10"],
            counts={"ConvTranspose": 1, "Add": 0, **NO_LAYOUT_OPS},
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose2d_f64",
            _model("ConvTranspose2d", 3, 4, 3, stride=2, padding=1, output_padding=1),
            [("B", 3, 5, 5)],
            factory=True,
            counts={"ConvTranspose": 0},
            variants=["f64"],
        ),
        case(
            "conv_transpose1d_unbatched_same",
            _model("ConvTranspose1d", 2, 3, 4, stride=3, padding="SAME", wrap=None),
            [(2, 5)],
            factory=True,
            expect=["Unsqueeze -> ConvTranspose -> Squeeze"],
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose1d_same_lower_no_bias",
            _model("ConvTranspose1d", 2, 3, 3, stride=2, padding="SAME_LOWER", use_bias=False),
            [("B", 2, 6)],
            factory=True,
            expect=["ConvTranspose"],
            counts={"Add": 0},
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose3d_dilated_grouped",
            _model(
                "ConvTranspose3d", 4, 6, (2, 3, 2), stride=(1, 2, 1), dilation=(2, 1, 1), groups=2
            ),
            [("B", 4, 3, 4, 3)],
            factory=True,
            expect=["ConvTranspose"],
            counts=NO_LAYOUT_OPS,
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose2d_pairs",
            _model("ConvTranspose", 2, 2, 3, (3, 2), stride=2, padding=((2, 0), (1, 1))),
            [("B", 2, 4, 5)],
            factory=True,
            expect=["ConvTranspose"],
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose2d_circular",
            _model("ConvTranspose2d", 2, 3, 3, stride=2, padding="SAME", padding_mode="CIRCULAR"),
            [("B", 2, 4, 5)],
            factory=True,
            expect=["ConvTranspose"],
            opset=19,
            variants=F32_ONLY,
        ),
        case(
            "conv_transpose2d_grad",
            _model("ConvTranspose2d", 2, 3, 3, stride=2, wrap=_grad),
            [(2, 2, 4, 4)],
            factory=True,
        ),
    ],
)
