"""conv_general_dilated as Conv / ConvTranspose, or an exact MatMul over shifted slices.

The lowering works in ONNX's channel-first layout (N, C, spatial...) and
(O, I/G, spatial...): operands whose dimension numbers differ get one Transpose
each (a constant kernel is permuted at conversion time) and the result one back.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, has_kernel, is_symbolic
from jax2onnx_lax._util import reshape
from jax2onnx_lax.blocks import conv_transpose_kernel
from jax2onnx_lax.dot import compute_dtype
from jax2onnx_lax.windows import pad_computed

family = Family("lax")

_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


def _work_dtype(out_dtype):
    """(dtype to compute in, whether ONNX Conv can compute it)."""
    out_dtype = np.dtype(out_dtype)
    if has_kernel("Conv", out_dtype) and has_kernel("ConvTranspose", out_dtype):
        return out_dtype, True
    return compute_dtype(out_dtype), False


def _slice(ctx, x, axes, starts, ends, steps=None):
    if not axes:
        return x
    steps = None if steps is None else ctx.i64(steps)
    return ctx.op.Slice(x, ctx.i64(starts), ctx.i64(ends), ctx.i64(axes), steps)


def _equal(padding, same) -> bool:
    """Whether two paddings are the same expressions (symbolic dimensions compare exactly)."""
    return all(
        str(a) == str(c) and str(b) == str(d) for (a, b), (c, d) in zip(padding, same, strict=True)
    )


def _end(n):
    """A Slice end that stops ``n`` elements before the end of the axis."""
    return -n if n > 0 else _INT64_MAX


def _ungroup_batch(ctx, x, in_shape, spec, groups):
    """Batch groups become feature groups: (groups*N, C, S...) -> (N, groups*C, S...).

    The batch axis is split in place and one Transpose brings the operand to the
    channel-first layout (it also does the dimension numbers' permutation).
    """
    b_axis = spec[0]
    n_out = in_shape[b_axis] // groups
    split = [*in_shape[:b_axis], groups, n_out, *in_shape[b_axis + 1 :]]
    x = reshape(ctx, x, split, keep=b_axis)

    def moved(a):
        return a + (a > b_axis)

    x = ctx.op.Transpose(x, perm=[b_axis + 1, b_axis, *(moved(a) for a in spec[1:])])
    c, spatial = in_shape[spec[1]], [in_shape[a] for a in spec[2:]]
    new = [n_out, groups * c, *spatial]
    return reshape(ctx, x, new, keep=1), new


def _dilate(ctx, x, shape, dilation):
    """Interleave d-1 zeros after every element of each spatial axis (the tail is left on)."""
    n_sp = len(dilation)
    x = ctx.op.Unsqueeze(x, ctx.i64([3 + 2 * i for i in range(n_sp)]))
    pads = [0] * (2 + 2 * n_sp) * 2
    for i, d in enumerate(dilation):
        pads[len(pads) // 2 + 3 + 2 * i] = d - 1
    x = ctx.op.Pad(x, ctx.i64(pads))
    new = [*shape[:2], *(s * d for s, d in zip(shape[2:], dilation))]
    return reshape(ctx, x, new, keep=2), new


def _patch_matmul(ctx, x, w, shape, kernel, strides, dilation, groups, out_shape):
    """Conv as MatMul: one strided Slice per kernel offset, stacked, times the kernel matrix.

    For dtypes ONNX Runtime has no Conv kernel for (float64, integers): every
    product and sum is computed in the output dtype itself, so it is exact.
    """
    n_sp = len(kernel)
    eff = [(k - 1) * r + 1 for k, r in zip(kernel, dilation)]
    xu = ctx.op.Unsqueeze(x, ctx.i64([2]))
    axes = list(range(3, 3 + n_sp))
    taps = []
    for offset in itertools.product(*(range(k) for k in kernel)):
        starts = [o * r for o, r in zip(offset, dilation)]
        ends = [_end(e - 1 - s) for e, s in zip(eff, starts)]
        full = all(s == 0 for s in starts) and all(e == _INT64_MAX for e in ends)
        if full and all(s == 1 for s in strides):
            taps.append(xu)
        else:
            taps.append(_slice(ctx, xu, axes, starts, ends, list(strides)))
    stacked = taps[0] if len(taps) == 1 else ctx.op.Concat(*taps, axis=2)
    c, o = shape[1], out_shape[1]
    taps_n = int(np.prod(kernel, dtype=np.int64))
    inner = c // groups * taps_n
    positions = 1
    for d in out_shape[2:]:
        positions = positions * d
    patches = reshape(ctx, stacked, [shape[0], groups, inner, positions], keep=1)
    if w.const_value is not None:
        wm = ctx.const(w.const_value.numpy().reshape(groups, o // groups, inner))
    else:
        wm = reshape(ctx, w, [groups, o // groups, inner])
    return reshape(ctx, ctx.op.MatMul(wm, patches), out_shape, keep=1)


def _conv(strides, padding, dn=None, **kw):
    return lambda x, w: lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=dn, **kw)


def _grad(fn, argnum):
    """The gradient of ``sum(fn(x, w) ** 2)`` with respect to input ``argnum``."""

    def loss(x, w):
        y = fn(x, w)
        return (y * y).sum()

    return jax.grad(loss, argnums=argnum)


_F32 = ["f32"]  # cases pinning Conv/ConvTranspose: float64 has no ORT kernel (see *_f64)
_NHWC = ("NHWC", "HWIO", "NHWC")
_NCHW = ("NCHW", "OIHW", "NCHW")
_KERNEL_HWIO = np.linspace(-1.0, 1.0, 3 * 3 * 2 * 4, dtype=np.float32).reshape(3, 3, 2, 4)


def _conv_cases():
    return [
        case(
            "nchw_same",
            _conv((1, 1), "SAME"),
            [("B", 3, 6, 6), (4, 3, 3, 3)],
            expect=["Conv:Bx4x6x6"],
            counts={"Transpose": 0},
            variants=["f32", "bf16"],
        ),
        case(
            "nchw_same_f64",
            _conv((1, 1), "SAME"),
            [("B", 3, 6, 6), (4, 3, 3, 3)],
            expect=["Slice -> Concat -> Reshape -> MatMul"],
            counts={"Conv": 0, "Transpose": 0},
            variants=["f64"],
        ),
        case(
            "nhwc_hwio",
            _conv((1, 1), "SAME", _NHWC),
            [("B", 6, 6, 2), (3, 3, 2, 4)],
            expect=["Transpose -> Conv -> Transpose:Bx6x6x4"],
            counts={"Transpose": 3},
            variants=_F32,
        ),
        case(
            "nhwc_const_kernel",
            lambda x: lax.conv_general_dilated(
                x, _KERNEL_HWIO, (1, 1), "VALID", dimension_numbers=_NHWC
            ),
            [("B", 6, 5, 2)],
            expect=["Transpose -> Conv -> Transpose:Bx4x3x4"],
            counts={"Transpose": 2},
            variants=_F32,
        ),
        case(
            "nhwc_any_dtype", _conv((2, 1), ((1, 0), (2, 1)), _NHWC), [("B", 7, 6, 2), (3, 2, 2, 4)]
        ),
        case(
            "conv1d_nwc_strided",
            _conv((2,), "VALID", ("NWC", "WIO", "NWC")),
            [("B", 10, 3), (3, 3, 5)],
            expect=["Conv"],
            variants=_F32,
        ),
        case("conv1d_symbolic_length", _conv((1,), "SAME"), [("B", 3, "T"), (4, 3, 3)]),
        case(
            "conv3d_asymmetric_pads",
            _conv((1, 2, 1), ((1, 0), (0, 2), (2, 1))),
            [("B", 2, 5, 6, 4), (3, 2, 2, 3, 2)],
        ),
        case(
            "conv3d_ndhwc",
            _conv((1, 1, 1), "SAME", ("NDHWC", "DHWIO", "NDHWC")),
            [(2, 4, 5, 3, 2), (2, 3, 2, 2, 3)],
        ),
        case(
            "odd_layouts",
            _conv((1, 2), "SAME", ("HNCW", "WOIH", "CWNH")),
            [(6, "B", 3, 7), (3, 4, 3, 2)],
        ),
        case(
            "rhs_dilation",
            _conv((1, 1), "SAME", rhs_dilation=(2, 3)),
            [("B", 2, 9, 9), (3, 2, 3, 3)],
        ),
        case(
            "feature_groups",
            _conv((1, 1), "VALID", feature_group_count=2),
            [("B", 4, 6, 6), (6, 2, 3, 3)],
        ),
        case(
            "depthwise",
            _conv((2, 2), "SAME", _NHWC, feature_group_count=3),
            [("B", 7, 7, 3), (3, 3, 1, 6)],
        ),
        case(
            "negative_padding",
            _conv((1, 1), ((-1, 2), (1, -2))),
            [("B", 2, 7, 8), (3, 2, 3, 3)],
            expect=["Slice -> Conv"],
            variants=_F32,
        ),
        case(
            "negative_padding_f64", _conv((2, 1), ((-2, 1), (0, -3))), [(2, 2, 8, 9), (3, 2, 2, 3)]
        ),
        case(
            "batch_groups",
            _conv((1, 1), "VALID", batch_group_count=2),
            [(4, 3, 6, 6), (4, 3, 3, 3)],
        ),
        case(
            "conv_transpose",
            lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=_NHWC),
            [("B", 5, 5, 2), (3, 3, 2, 4)],
            expect=["Transpose -> ConvTranspose -> Transpose:Bx10x10x4"],
            counts={"Conv": 0},
            variants=_F32,
        ),
        case(
            "conv_transpose_const_kernel",
            lambda x: lax.conv_transpose(x, _KERNEL_HWIO, (2, 1), "VALID", dimension_numbers=_NHWC),
            [("B", 4, 5, 2)],
            expect=["ConvTranspose"],
            counts={"Transpose": 2, "Slice": 0},
            variants=_F32,
        ),
        case(
            "conv_transpose_any",
            lambda x, w: lax.conv_transpose(
                x, w, (3, 2), ((2, 1), (0, 3)), rhs_dilation=(1, 2), dimension_numbers=_NCHW
            ),
            [("B", 2, 4, 5), (4, 2, 3, 2)],
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "lhs_dilation_strided",
            _conv((2, 2), ((1, 1), (2, 0)), lhs_dilation=(2, 3)),
            [("B", 2, 4, 5), (3, 2, 3, 3)],
            expect=["Pad -> Reshape -> Slice -> Conv"],
            counts={"ConvTranspose": 0},
            variants=_F32,
        ),
        case(
            "lhs_dilation_wide_pads",
            _conv((1, 1), ((3, 4), (0, 0)), lhs_dilation=(2, 2), feature_group_count=2),
            [("B", 4, 4, 5), (4, 2, 2, 2)],
        ),
        case(
            "grad_input",
            _grad(_conv((2, 2), "SAME", _NHWC), 0),
            [("B", 6, 6, 2), (3, 3, 2, 4)],
        ),
        case(
            "grad_input_grouped",
            _grad(_conv((2, 1), ((1, 1), (0, 2)), feature_group_count=2), 0),
            [("B", 4, 7, 5), (6, 2, 3, 2)],
        ),
        case(
            "grad_weights",
            _grad(_conv((2, 2), "SAME", _NHWC), 1),
            [("B", 6, 6, 2), (3, 3, 2, 4)],
        ),
        case(
            "grad_weights_grouped",
            _grad(_conv((1, 1), "SAME", feature_group_count=2), 1),
            [("B", 4, 5, 5), (6, 2, 3, 3)],
            expect=["Conv"],
            variants=_F32,
        ),
        case(
            "grad_weights_grouped_f64",
            _grad(_conv((1, 2), "SAME", feature_group_count=2), 1),
            [(2, 4, 5, 6), (6, 2, 3, 3)],
            variants=["f64"],
        ),
        case("int32", _conv((1,), "SAME"), [(2, 3, 7), (4, 3, 3)], dtypes=[np.int32] * 2),
        case(
            "int8_wraps",
            _conv((1, 1), "VALID"),
            [(1, 3, 5, 5), (2, 3, 3, 3)],
            dtypes=[np.int8] * 2,
            input_range=(-128, 128),
        ),
        case(
            "int8_to_int32",
            _conv((1, 1), "SAME", preferred_element_type=np.int32),
            [(2, 3, 5, 5), (2, 3, 3, 3)],
            dtypes=[np.int8] * 2,
            input_range=(-128, 128),
        ),
        case(
            "int64",
            _conv((1,), "VALID"),
            [(2, 3, 7), (4, 3, 3)],
            dtypes=[np.int64] * 2,
            variants=["f64"],
        ),
        case(
            "f16",
            _conv((1, 1), "SAME"),
            [(2, 3, 5, 5), (2, 3, 3, 3)],
            dtypes=[np.float16] * 2,
            expect=["Conv"],
        ),
        case(
            "f16_to_float32",
            _conv((1, 1), "SAME", preferred_element_type=np.float32),
            [(2, 3, 5, 5), (2, 3, 3, 3)],
            dtypes=[np.float16] * 2,
            expect=["Cast -> Conv"],
        ),
        case(
            "bf16_to_float32",
            _conv((1, 1), "SAME", preferred_element_type=np.float32),
            [(2, 3, 5, 5), (2, 3, 3, 3)],
            variants=["bf16"],
        ),
        # a (dilated) kernel larger than the padded input: no windows, an empty result as
        # in JAX (ONNX Runtime's Conv refuses such an input), whatever the values
        case(
            "kernel_larger_than_input",
            _conv((1, 1), "VALID", rhs_dilation=(2, 2)),
            [(1, 2, 3, 3), (4, 2, 3, 3)],
            no_unused_inputs=False,
        ),
        case(
            "kernel_larger_than_input_symbolic_batch",
            _conv((1, 1), [(1, 0), (0, 0)]),
            [("B", 2, 3, 3), (4, 2, 5, 4)],
            no_unused_inputs=False,
        ),
    ]


@family.lowering(lax.conv_general_dilated_p, cases=_conv_cases)
def conv_general_dilated(
    ctx,
    lhs,
    rhs,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count,
    batch_group_count,
    precision=None,
    preferred_element_type=None,
    **_,
):
    """conv_general_dilated -> [Transpose] Conv | ConvTranspose [Transpose].

    lhs_dilation is a ConvTranspose (strides = lhs dilation, flipped and
    in/out-swapped kernel) when the window strides are 1 and the padding fits,
    otherwise the input is dilated exactly by interleaving zeros (Unsqueeze, Pad,
    Reshape) before a Conv. batch_group_count becomes feature groups by moving
    the batch groups into the channel axis. Negative padding is a Slice. Where
    ONNX Runtime has no Conv kernel (float64, integers) the convolution is a
    MatMul over strided slices, computed in the output dtype (narrow integers in
    int32, wrapping like JAX). So is a convolution whose group count is symbolic
    (per-sample kernels under ``jax.vmap`` fold the batch into the groups), since
    Conv's ``group`` is a static attribute.
    """
    lhs_aval, rhs_aval = ctx.avals_in
    out_aval = ctx.avals_out[0]
    lhs_spec, rhs_spec, out_spec = (list(map(int, s)) for s in dimension_numbers)
    work, native = _work_dtype(out_aval.dtype)
    n_sp = lhs_aval.ndim - 2
    # a symbolic group count (per-sample kernels under vmap fold the batch into the groups)
    # cannot be Conv's static `group`: such convolutions are the MatMul over shifted slices
    groups = feature_group_count if batch_group_count == 1 else batch_group_count
    native = native and n_sp > 0 and not is_symbolic(groups)
    x = ctx.cast(lhs, work)
    w = ctx.transpose(ctx.cast(rhs, work), rhs_spec)
    shape = [lhs_aval.shape[i] for i in lhs_spec]
    kshape = [rhs_aval.shape[i] for i in rhs_spec]
    kernel = [int(k) for k in kshape[2:]]
    out_shape = [out_aval.shape[i] for i in out_spec]
    if batch_group_count > 1:
        x, shape = _ungroup_batch(ctx, x, lhs_aval.shape, lhs_spec, batch_group_count)
    else:
        x = ctx.transpose(x, lhs_spec)
    strides, dilation = list(window_strides), list(rhs_dilation)
    eff = [(k - 1) * r + 1 for k, r in zip(kernel, dilation)]
    if any(is_symbolic(p) for pair in padding for p in pair):  # "SAME" on symbolic sizes
        same = lax.padtype_to_pads(shape[2:], eff, strides, "SAME")
        if native and all(d == 1 for d in (*dilation, *lhs_dilation)) and _equal(padding, same):
            # XLA's SAME puts the odd pixel at the end: ONNX's SAME_UPPER (ONNX Runtime
            # computes it from the run-time size; it takes no dilation)
            y = ctx.op.Conv(
                x, w, kernel_shape=kernel, strides=strides, auto_pad="SAME_UPPER", group=groups
            )
            return _finish(ctx, y, out_spec, work)
        if any(d > 1 for d in lhs_dilation):
            raise ctx.error(
                f"padding {padding} depends on symbolic sizes together with lhs_dilation "
                f"{tuple(lhs_dilation)}; give the spatial axes static sizes"
            )
        zero = ctx.const(np.zeros((), np.dtype(work)))
        x, _ = pad_computed(ctx, x, shape, [(0, 0), (0, 0), *padding], zero)
        padding = [(0, 0)] * n_sp
    lo, hi = [int(p[0]) for p in padding], [int(p[1]) for p in padding]
    if any(d > 1 for d in lhs_dilation):
        fits = all(a <= e - 1 and b <= e - 1 for a, b, e in zip(lo, hi, eff))
        if native and fits and all(s == 1 for s in strides):
            y = ctx.op.ConvTranspose(
                x,
                conv_transpose_kernel(ctx, w, kshape, groups),
                kernel_shape=kernel,
                strides=list(lhs_dilation),
                dilations=dilation,
                pads=[e - 1 - a for a, e in zip(lo, eff)] + [e - 1 - b for b, e in zip(hi, eff)],
                group=groups,
            )
            return _finish(ctx, y, out_spec, work)
        x, shape = _dilate(ctx, x, shape, lhs_dilation)
        hi = [b - (d - 1) for b, d in zip(hi, lhs_dilation)]
    crop = [i for i in range(n_sp) if lo[i] < 0 or hi[i] < 0]
    if crop:
        starts = [max(-lo[i], 0) for i in crop]
        ends = [_end(max(-hi[i], 0)) for i in crop]
        x = _slice(ctx, x, [2 + i for i in crop], starts, ends)
        lo, hi = [max(a, 0) for a in lo], [max(b, 0) for b in hi]
    if native:
        y = ctx.op.Conv(
            x,
            w,
            kernel_shape=kernel,
            strides=strides,
            dilations=dilation,
            pads=lo + hi,
            group=groups,
        )
        return _finish(ctx, y, out_spec, work)
    if any(lo) or any(hi):
        x = ctx.op.Pad(x, ctx.i64([0, 0, *lo, 0, 0, *hi]))
    y = _patch_matmul(ctx, x, w, shape, kernel, strides, dilation, groups, out_shape)
    return _finish(ctx, y, out_spec, work)


def _finish(ctx, y, out_spec, work):
    y = ctx.transpose(y, np.argsort(out_spec))
    return ctx.cast(y, ctx.avals_out[0].dtype)


register = family.register
