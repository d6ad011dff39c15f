"""``lax.fft_p`` (``jnp.fft.*``) and the real-valued ``jnp.fft`` helpers.

Every form of ``lax.fft_p`` has a complex side (``FFT``/``IFFT`` complex to
complex, ``RFFT`` real to complex, ``IRFFT`` complex to real), so the rules are
registered for complex values: a complex array arrives and leaves as stored,
a float tensor with a trailing axis of 2 (real, imaginary) -- the layout ONNX
``DFT`` itself uses. The transformed axes are the trailing ``len(fft_lengths)``
axes; they and the leading (batch) axes may be symbolic.

Two forms:

* opset 17 and newer: one ``DFT`` per transformed axis (``axis`` an attribute
  at 17-19, an input from 20). ONNX Runtime runs it in float32 and float64 and
  normalises the inverse by ``1/n`` like JAX, but is accurate only for
  power-of-two lengths; axes of other lengths up to ``_MATMUL_MAX`` take the
  matrix form below (see ``fft`` and docs/numerics.md).
* below opset 17 (no ``DFT``): per axis one ``MatMul`` with a constant DFT
  matrix (:func:`_matrix`), the axis moved last and the stored pairs
  flattened, so one product maps interleaved (re, im) inputs to interleaved
  outputs.

A transformed axis of symbolic length (:func:`_symbolic_step`) takes the same
choice at run time: an ``If`` on the length picks the ``DFT`` form or the
``MatMul`` form, whose matrix is then computed in the graph from the length
(:func:`_runtime_matrix`); below opset 17 the computed matrix is always used.

``IRFFT`` of the last axis, longer than ``_IRFFT_MATMUL_MAX`` (shorter ones take
the ``MatMul`` form): ONNX Runtime's one-sided inverse ``DFT`` is inexact
for odd lengths (float64 errors ~1e-8) and its meaning for one-sided inputs
changed between versions of the spec, so the rule rebuilds the full Hermitian
spectrum (``X[n-k] = conj(X[k])``: a reversed ``Slice``, a sign ``Mul`` and a
``Concat``), takes a complex inverse ``DFT`` and keeps the real part. That
drops the imaginary parts of the zero (and Nyquist) frequencies, as JAX does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray

from jax2onnx.plugin import Family, case, is_symbolic

family = Family("lax")

_FFT, _IFFT, _RFFT, _IRFFT = 0, 1, 2, 3


def _axes(ctx, fft_lengths) -> tuple[int, list[int]]:
    """The logical rank of the complex side and the transformed axes (non-negative)."""
    rank = len(ctx.avals_in[0].shape)
    return rank, list(range(rank - len(fft_lengths), rank))


def _real_dtype(ctx) -> np.dtype:
    return np.dtype(ctx.stored_aval(ctx.avals_in[0]).dtype)


# -- the steps: one transform of one axis ---------------------------------------------------
def _steps(kind: int, axes: list[int], lengths) -> list[tuple[int, int, Any]]:
    """``(axis, kind, n)`` per axis, in order: RFFT's real axis first, IRFFT's last."""
    lengths = [n if is_symbolic(n) else int(n) for n in lengths]
    if kind in (_FFT, _IFFT):
        return [(a, kind, n) for a, n in zip(axes, lengths, strict=True)]
    inner = _FFT if kind == _RFFT else _IFFT
    steps = [(a, inner, n) for a, n in zip(axes[:-1], lengths[:-1], strict=True)]
    last = (axes[-1], kind, lengths[-1])
    return [last, *steps] if kind == _RFFT else [*steps, last]


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


# -- DFT form (opset 17+) ---------------------------------------------------------------
def _dft(ctx, x, axis: int, *, inverse: int = 0, onesided: int = 0):
    """One ``DFT`` of stored ``x`` (``[..., 1]`` real or ``[..., 2]`` complex) along ``axis``."""
    if ctx.opset >= 20:
        return ctx.op.DFT(x, None, ctx.i64(axis), inverse=inverse, onesided=onesided)
    return ctx.op.DFT(x, None, axis=axis, inverse=inverse, onesided=onesided)


def _inverse_dft(ctx, x, axis: int, n, dtype: np.dtype):
    """The inverse ``DFT``; float64 of a length not a power of two as ``conj(DFT(conj x)) / n``.

    ONNX Runtime's inverse of such lengths scales by ``1/n`` rounded to float32
    (float64 errors ~3e-8); its forward transform is accurate. ``n`` is an
    int, or an int64 ``[1]`` value when it is known at run time only (float64
    then always takes the conjugate form).
    """
    static = isinstance(n, int)
    if dtype != np.float64 or (static and _pow2(n)):
        return _dft(ctx, x, axis, inverse=1)
    sign = np.array([1.0, -1.0], dtype)
    conj = ctx.op.Mul(x, sign)
    scale = sign / n if static else ctx.op.Div(ctx.const(sign, dtype), ctx.cast(n, dtype))
    return ctx.op.Mul(_dft(ctx, conj, axis), scale)


def _hermitian(ctx, half, n, dtype: np.dtype):
    """The full length-``n`` spectrum (axis -2) of the one-sided stored spectrum ``half``."""
    if isinstance(n, int):
        tail = n - (n // 2 + 1)  # frequencies n//2+1 .. n-1, mirrors of tail .. 1
        if tail == 0:
            return half
        start = ctx.i64([tail])
    else:  # (n - 1) // 2 at run time; 0 gives an empty Slice
        start = ctx.op.Div(ctx.op.Sub(n, ctx.i64([1])), ctx.i64([2]))
    mirrored = ctx.op.Slice(half, start, ctx.i64([0]), ctx.i64([-2]), ctx.i64([-1]))
    conj = ctx.op.Mul(mirrored, np.array([1.0, -1.0], dtype))
    return ctx.op.Concat(half, conj, axis=-2)


def _dft_step(ctx, x, axis: int, kind: int, n, dtype: np.dtype):
    if kind == _FFT:
        return _dft(ctx, x, axis)
    if kind == _IFFT:
        return _inverse_dft(ctx, x, axis, n, dtype)
    if kind == _RFFT:
        return _dft(ctx, ctx.op.Unsqueeze(x, ctx.i64([-1])), axis, onesided=1)
    full = _hermitian(ctx, x, n, dtype)
    return ctx.op.Gather(_inverse_dft(ctx, full, axis, n, dtype), ctx.i64(0), axis=-1)


_MATMUL_MAX = 1024  # longest non-power-of-two axis the DFT form transforms by MatMul
_IRFFT_MATMUL_MAX = 128  # longest power-of-two IRFFT axis transformed by MatMul (a 66 KB matrix)


def _by_matmul(kind: int, n: int) -> bool:
    """Whether an axis of static length ``n`` takes the ``MatMul`` form at opset 17+."""
    if _pow2(n):
        return kind == _IRFFT and n <= _IRFFT_MATMUL_MAX
    return n <= _MATMUL_MAX


@family.lowering(lax.fft_p, min_opset=17, values="complex")
def fft(ctx, x, *, fft_type, fft_lengths):
    """One ONNX ``DFT`` per transformed axis of power-of-two length, else one ``MatMul``.

    ONNX Runtime's ``DFT`` of other lengths loses accuracy with the length
    (float32: relative error ~1e-7 n, 1e-5 at n = 100), so axes of those
    lengths up to ``_MATMUL_MAX`` are transformed as below opset 17 (exact
    twiddles, one product); longer ones still use ``DFT``. So does IRFFT of a
    power-of-two length up to ``_IRFFT_MATMUL_MAX``: 2 nodes (Reshape, MatMul)
    instead of 5, and 2-15x faster in ONNX Runtime (``DFT`` is slow on
    batches), for a float32 error of ~1e-7 of the values. RFFT: a one-sided
    ``DFT`` of the last axis (input unsqueezed to ``[..., 1]``) then the other
    axes; IRFFT: the leading axes, then the last axis's full Hermitian spectrum
    (see the module docstring), an inverse ``DFT`` and its real part
    (``Gather`` of component 0).
    """
    rank, axes = _axes(ctx, fft_lengths)
    dtype = _real_dtype(ctx)
    shape = list(ctx.avals_in[0].shape)
    for axis, kind, n in _steps(int(fft_type), axes, fft_lengths):
        if is_symbolic(n):
            x = _symbolic_step(ctx, x, axis, rank, kind, n, dtype, shape)
        elif _by_matmul(kind, n):
            x = _matmul_step(ctx, x, axis, rank, kind, n, dtype)
        else:
            x = _dft_step(ctx, x, axis, kind, n, dtype)
        shape[axis] = n // 2 + 1 if kind == _RFFT else n
    return x


# -- matrix form (below opset 17) ---------------------------------------------------------
def _twiddles(n: int, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """``cos`` and ``sin`` of ``2 pi j k / n`` (float64, exact at multiples of pi/2)."""
    r = np.outer(np.arange(rows), np.arange(cols)) % n
    angle = 2 * np.pi * r / n
    cos, sin = np.cos(angle), np.sin(angle)
    quarter = (4 * r) % n == 0  # angle is a multiple of pi/2: exact 0 and +-1
    q = (4 * r // n) % 4
    cos[quarter] = np.array([1.0, 0.0, -1.0, 0.0])[q[quarter]]
    sin[quarter] = np.array([0.0, 1.0, 0.0, -1.0])[q[quarter]]
    return cos, sin


def _matrix(kind: int, n: int, dtype: np.dtype) -> np.ndarray:
    """The DFT of one axis as a right-multiplied matrix on flattened stored values.

    Complex sides are interleaved (re, im) pairs, so a complex axis of length
    ``n`` is ``2n`` rows or columns. FFT/IFFT: ``2n x 2n``; RFFT: ``n x 2m``;
    IRFFT: ``2m x n`` with ``m = n//2 + 1``. Inverse transforms include ``1/n``.
    """
    m = n // 2 + 1
    if kind in (_FFT, _IFFT):
        cos, sin = _twiddles(n, n, n)
        sign = 1.0 if kind == _IFFT else -1.0  # y_k = sum_j x_j e^(sign i theta_jk)
        w = np.empty((2 * n, 2 * n))
        w[0::2, 0::2], w[1::2, 0::2] = cos, -sign * sin
        w[0::2, 1::2], w[1::2, 1::2] = sign * sin, cos
        if kind == _IFFT:
            w /= n
    elif kind == _RFFT:
        cos, sin = _twiddles(n, n, m)
        w = np.empty((n, 2 * m))
        w[:, 0::2], w[:, 1::2] = cos, -sin
    else:  # IRFFT: x_j = (1/n) sum_k c_k (re_k cos - im_k sin), c_k = 2 off the edges
        cos, sin = _twiddles(n, m, n)
        weight = np.full((m, 1), 2.0)
        weight[0] = 1.0
        if n % 2 == 0:
            weight[-1] = 1.0
        w = np.empty((2 * m, n))
        w[0::2], w[1::2] = weight * cos / n, -weight * sin / n
    return w.astype(dtype)


def _matmul_step(ctx, x, axis: int, rank: int, kind: int, n, dtype: np.dtype):
    """Transform stored ``x`` along logical ``axis`` of a rank-``rank`` array by one MatMul.

    ``n`` is an int (a constant matrix) or an int64 ``[1]`` value (the matrix
    computed at run time, :func:`_runtime_matrix`).
    """
    complex_in, complex_out = kind != _RFFT, kind != _IRFFT
    stored_rank = rank + int(complex_in)
    perm = [a for a in range(rank) if a != axis] + [axis] + list(range(rank, stored_rank))
    x = ctx.transpose(x, perm)
    keep = [0] * (rank - 1)
    if complex_in:  # the trailing size spelled out: -1 is invalid when a batch axis is 0
        size = _length(ctx, n, half=kind == _IRFFT)
        x = ctx.op.Reshape(x, _target(ctx, keep, size, 2))
    if isinstance(n, int):
        matrix = ctx.const(_matrix(kind, n, dtype), dtype)
    else:
        matrix = _runtime_matrix(ctx, kind, n, dtype)
    y = ctx.op.MatMul(x, matrix)
    if complex_out:
        y = ctx.op.Reshape(y, _target(ctx, keep, _length(ctx, n, half=kind == _RFFT), 1, [2]))
    back = list(range(rank - 1))
    back.insert(axis, rank - 1)
    return ctx.transpose(y, back + list(range(rank, rank + int(complex_out))))


def _length(ctx, n, *, half: bool):
    """``n`` or the one-sided ``n // 2 + 1``: an int, or an int64 ``[1]`` for a run-time ``n``."""
    if not half:
        return n
    if isinstance(n, int):
        return n // 2 + 1
    return ctx.op.Add(ctx.op.Div(n, ctx.i64([2])), ctx.i64([1]))


def _target(ctx, keep, size, factor, tail=()):
    """A Reshape target ``keep + [size * factor] + tail`` (``size`` as :func:`_length`)."""
    if isinstance(size, int):
        return ctx.i64([*keep, size * factor, *tail])
    if factor != 1:
        size = ctx.op.Mul(size, ctx.i64([factor]))
    parts = [ctx.i64(keep), size] + ([ctx.i64(list(tail))] if tail else [])
    return ctx.op.Concat(*parts, axis=0)


@family.lowering(lax.fft_p, values="complex")
def fft_matmul(ctx, x, *, fft_type, fft_lengths):
    """Below opset 17 (no ``DFT``): one ``MatMul`` per transformed axis.

    Each axis is moved last, its stored (re, im) pairs flattened, multiplied by
    the constant matrix of :func:`_matrix` (float64 twiddles rounded once to
    the array's dtype) and unflattened; RFFT transforms the last axis first,
    IRFFT last, as for the ``DFT`` form.
    """
    rank, axes = _axes(ctx, fft_lengths)
    dtype = _real_dtype(ctx)
    for axis, kind, n in _steps(int(fft_type), axes, fft_lengths):
        length = ctx.dim(n) if is_symbolic(n) else n
        x = _matmul_step(ctx, x, axis, rank, kind, length, dtype)
    return x


# -- axes of symbolic length ------------------------------------------------------------------
def _symbolic_step(ctx, x, axis: int, rank: int, kind: int, n, dtype: np.dtype, shape: list):
    """One transform of an axis of symbolic length ``n``: the static rule, chosen at run time.

    An ``If`` takes the ``DFT`` form when ``n`` is a power of two (it divides
    2^62) or longer than ``_MATMUL_MAX``, else the ``MatMul`` form with the
    matrix computed from ``n`` (:func:`_runtime_matrix`), as :func:`fft`
    chooses for a static length. ``shape`` is the logical input shape.
    """
    length = ctx.dim(n)
    size = ctx.op.Squeeze(length, ctx.i64([0]))
    pow2 = ctx.op.Equal(ctx.op.Mod(ctx.i64(2**62), size), ctx.i64(0))
    use_dft = ctx.op.Or(pow2, ctx.op.Greater(size, ctx.i64(_MATMUL_MAX)))
    out = list(shape)
    out[axis] = n // 2 + 1 if kind == _RFFT else n
    aval = ShapedArray((*out, 2) if kind != _IRFFT else tuple(out), dtype)
    then_body, else_body = ctx.subgraph("fft_dft"), ctx.subgraph("fft_matmul")
    then_y = _dft_step(then_body.ctx, x, axis, kind, length, dtype)
    else_y = _matmul_step(else_body.ctx, x, axis, rank, kind, length, dtype)
    y = ctx.op.If(
        use_dft,
        then_branch=then_body.finish([then_y], [aval]),
        else_branch=else_body.finish([else_y], [aval]),
    )
    y.dtype = then_y.dtype  # the builder does not know If's output dtypes
    return y


def _runtime_matrix(ctx, kind: int, n, dtype: np.dtype):
    """:func:`_matrix` for the length in the int64 ``[1]`` value ``n``.

    The angles are ``2 pi r / n`` with ``r = j k mod n`` exact in int64, their
    cosines and sines taken in float64 and rounded once to ``dtype``.
    """
    op, f64 = ctx.op, np.float64
    zero, one = ctx.i64(0), ctx.i64(1)
    size = op.Squeeze(n, ctx.i64([0]))
    half = op.Add(op.Div(size, ctx.i64(2)), one)  # m = n//2 + 1
    j = op.Unsqueeze(op.Range(zero, half if kind == _IRFFT else size, one), ctx.i64([1]))
    k = op.Unsqueeze(op.Range(zero, half if kind == _RFFT else size, one), ctx.i64([0]))
    length = ctx.cast(n, f64)
    angle = op.Div(
        op.Mul(ctx.cast(op.Mod(op.Mul(j, k), n), f64), ctx.const(2 * np.pi, f64)), length
    )
    cos, sin = op.Cos(angle), op.Sin(angle)
    if kind in (_FFT, _IFFT):  # [n, 2, n, 2]: (row j, in part a, column k, out part b)
        sign = 1.0 if kind == _IFFT else -1.0
        parts = ctx.i64([1, 3])
        w = op.Add(
            op.Mul(op.Unsqueeze(cos, parts), ctx.const(np.eye(2).reshape(1, 2, 1, 2), f64)),
            op.Mul(
                op.Unsqueeze(sin, parts),
                ctx.const(np.array([[0.0, sign], [-sign, 0.0]]).reshape(1, 2, 1, 2), f64),
            ),
        )
        if kind == _IFFT:
            w = op.Div(w, length)
        width = op.Mul(n, ctx.i64([2]))
        w = op.Reshape(w, op.Concat(width, width, axis=0))
    elif kind == _RFFT:  # [n, m, 2] -> [n, 2m]
        w = op.Concat(
            op.Unsqueeze(cos, ctx.i64([2])), op.Unsqueeze(op.Neg(sin), ctx.i64([2])), axis=2
        )
        w = op.Reshape(w, ctx.i64([0, -1]))
    else:  # IRFFT: [m, 2, n] -> [2m, n], c_k = 2 but 1 at k = 0 and k = n/2
        two_k = op.Mul(j, ctx.i64(2))
        edges = op.Add(ctx.cast(op.Equal(j, zero), f64), ctx.cast(op.Equal(two_k, n), f64))
        weight = op.Div(op.Sub(ctx.const(2.0, f64), edges), length)
        parts = ctx.i64([1])
        w = op.Concat(
            op.Unsqueeze(op.Mul(weight, cos), parts),
            op.Unsqueeze(op.Neg(op.Mul(weight, sin)), parts),
            axis=1,
        )
        w = op.Reshape(w, op.Concat(ctx.i64([-1]), n, axis=0))
    return ctx.cast(w, dtype)


_GRID = np.arange(24.0).reshape(4, 6)
family.add_cases(
    "jnp.fft_helpers",
    lambda: [
        case("fftfreq", lambda x: x * jnp.fft.fftfreq(8), [("B", 8)]),
        case("fftfreq_odd_d", lambda x: x * jnp.fft.fftfreq(7, d=0.5), [(7,)]),
        case("rfftfreq", lambda x: x * jnp.fft.rfftfreq(8, d=0.1), [("B", 5)]),
        case("fftshift", lambda x: jnp.fft.fftshift(x, axes=-1), [("B", 6)]),
        case("fftshift_all", lambda x: jnp.fft.fftshift(x), [(5, 6)]),
        case("ifftshift", lambda x: jnp.fft.ifftshift(x, axes=(0, 1)), [(5, 7, 2)]),
        case("fftshift_int", lambda x: jnp.fft.fftshift(x), [_GRID.astype(np.int32)]),
        case(
            "shift_freqs",
            lambda x: x * jnp.fft.fftshift(jnp.fft.fftfreq(6)),
            [("B", 6)],
        ),
        case(
            "fftshift_grad",
            jax.grad(lambda x: (jnp.fft.ifftshift(x) ** 2 * jnp.arange(6.0)).sum()),
            [(6,)],
        ),
    ],
)


register = family.register
