"""``lax.fft_p`` (``jnp.fft.*``) and the real-valued ``jnp.fft`` helpers.

Every form of ``lax.fft_p`` has a complex side (``FFT``/``IFFT`` complex to
complex, ``RFFT`` real to complex, ``IRFFT`` complex to real), so the rules are
registered for complex values: a complex array arrives and leaves as stored,
a float tensor with a trailing axis of 2 (real, imaginary) -- the layout ONNX
``DFT`` itself uses. The transformed axes are the trailing ``len(fft_lengths)``
axes, whose sizes JAX fixes at trace time; leading (batch) axes may be symbolic.

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

``IRFFT`` of the last axis: ONNX Runtime's one-sided inverse ``DFT`` is inexact
for odd lengths (float64 errors ~1e-8) and its meaning for one-sided inputs
changed between versions of the spec, so the rule rebuilds the full Hermitian
spectrum (``X[n-k] = conj(X[k])``: a reversed ``Slice``, a sign ``Mul`` and a
``Concat``), takes a complex inverse ``DFT`` and keeps the real part. That
drops the imaginary parts of the zero (and Nyquist) frequencies, as JAX does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case

family = Family("lax")

_FFT, _IFFT, _RFFT, _IRFFT = 0, 1, 2, 3


def _axes(ctx, fft_lengths) -> tuple[int, list[int]]:
    """The logical rank of the complex side and the transformed axes (non-negative)."""
    rank = len(ctx.avals_in[0].shape)
    return rank, list(range(rank - len(fft_lengths), rank))


def _real_dtype(ctx) -> np.dtype:
    return np.dtype(ctx.stored_aval(ctx.avals_in[0]).dtype)


# -- the steps: one transform of one axis ---------------------------------------------------
def _steps(kind: int, axes: list[int], lengths) -> list[tuple[int, int, int]]:
    """``(axis, kind, n)`` per axis, in order: RFFT's real axis first, IRFFT's last."""
    lengths = [int(n) for n in lengths]
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


def _inverse_dft(ctx, x, axis: int, n: int, dtype: np.dtype):
    """The inverse ``DFT``; float64 of a length not a power of two as ``conj(DFT(conj x)) / n``.

    ONNX Runtime's inverse of such lengths scales by ``1/n`` rounded to float32
    (float64 errors ~3e-8); its forward transform is accurate.
    """
    if _pow2(n) or dtype != np.float64:
        return _dft(ctx, x, axis, inverse=1)
    conj = ctx.op.Mul(x, np.array([1.0, -1.0], dtype))
    return ctx.op.Mul(_dft(ctx, conj, axis), np.array([1.0, -1.0], dtype) / n)


def _hermitian(ctx, half, n: int, dtype: np.dtype):
    """The full length-``n`` spectrum (axis -2) of the one-sided stored spectrum ``half``."""
    tail = n - (n // 2 + 1)  # frequencies n//2+1 .. n-1, mirrors of tail .. 1
    if tail == 0:
        return half
    mirrored = ctx.op.Slice(half, ctx.i64([tail]), ctx.i64([0]), ctx.i64([-2]), ctx.i64([-1]))
    conj = ctx.op.Mul(mirrored, np.array([1.0, -1.0], dtype))
    return ctx.op.Concat(half, conj, axis=-2)


def _dft_step(ctx, x, axis: int, kind: int, n: int, dtype: np.dtype):
    if kind == _FFT:
        return _dft(ctx, x, axis)
    if kind == _IFFT:
        return _inverse_dft(ctx, x, axis, n, dtype)
    if kind == _RFFT:
        return _dft(ctx, ctx.op.Unsqueeze(x, ctx.i64([-1])), axis, onesided=1)
    full = _hermitian(ctx, x, n, dtype)
    return ctx.op.Gather(_inverse_dft(ctx, full, axis, n, dtype), ctx.i64(0), axis=-1)


_MATMUL_MAX = 1024  # longest non-power-of-two axis the DFT form transforms by MatMul


@family.lowering(lax.fft_p, min_opset=17, values="complex")
def fft(ctx, x, *, fft_type, fft_lengths):
    """One ONNX ``DFT`` per transformed axis of power-of-two length, else one ``MatMul``.

    ONNX Runtime's ``DFT`` of other lengths loses accuracy with the length
    (float32: relative error ~1e-7 n, 1e-5 at n = 100), so axes of those
    lengths up to ``_MATMUL_MAX`` are transformed as below opset 17 (exact
    twiddles, one product); longer ones still use ``DFT``. RFFT: a one-sided
    ``DFT`` of the last axis (input unsqueezed to ``[..., 1]``) then the other
    axes; IRFFT: the leading axes, then the last axis's full Hermitian spectrum
    (see the module docstring), an inverse ``DFT`` and its real part
    (``Gather`` of component 0).
    """
    rank, axes = _axes(ctx, fft_lengths)
    dtype = _real_dtype(ctx)
    for axis, kind, n in _steps(int(fft_type), axes, fft_lengths):
        if _pow2(n) or n > _MATMUL_MAX:
            x = _dft_step(ctx, x, axis, kind, n, dtype)
        else:
            x = _matmul_step(ctx, x, axis, rank, kind, n, dtype)
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


def _matmul_step(ctx, x, axis: int, rank: int, kind: int, n: int, dtype: np.dtype):
    """Transform stored ``x`` along logical ``axis`` of a rank-``rank`` array by one MatMul."""
    complex_in, complex_out = kind != _RFFT, kind != _IRFFT
    stored_rank = rank + int(complex_in)
    perm = [a for a in range(rank) if a != axis] + [axis] + list(range(rank, stored_rank))
    x = ctx.transpose(x, perm)
    keep = [0] * (rank - 1)
    if complex_in:
        x = ctx.op.Reshape(x, ctx.i64([*keep, -1]))
    y = ctx.op.MatMul(x, ctx.const(_matrix(kind, n, dtype), dtype))
    if complex_out:
        y = ctx.op.Reshape(y, ctx.i64([*keep, -1, 2]))
    back = list(range(rank - 1))
    back.insert(axis, rank - 1)
    return ctx.transpose(y, back + list(range(rank, rank + int(complex_out))))


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
        x = _matmul_step(ctx, x, axis, rank, kind, n, dtype)
    return x


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
