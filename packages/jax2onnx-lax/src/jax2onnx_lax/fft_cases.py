"""Cases of :mod:`jax2onnx_lax.fft` (``lax.fft_p``), kept apart for the module's length.

Complex inputs (``dtypes=[_C]``) run as complex64 and complex128; real inputs
as float32 and float64. The default opset (23) takes the ``DFT`` form
(``DFT`` for power-of-two lengths, ``MatMul`` for other lengths), the
``opset15_*`` cases the ``MatMul`` form; the ``*_symbolic*`` cases transform
axes of symbolic length, run at lengths that take either form. The cases of
``_arithmetic`` also need complex elementwise and layout rules (``mul``,
``abs``, ``conj``, ``pad`` ...), and the spectral solver closes the list.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case

family = Family("lax")

_C = np.complex64
_MATMUL_ONLY = {"DFT": 0}


def _irfft(n):
    """``lax.fft`` IRFFT of length ``n`` (``jnp.fft.irfft(x, n)`` pads its input first)."""
    return lambda x: lax.fft(x, lax.FftType.IRFFT, (n,))


def _rfft_roundtrip(n):
    return lambda x: lax.fft(lax.fft(x, lax.FftType.RFFT, (n,)), lax.FftType.IRFFT, (n,))


def _transforms():
    return [
        # one axis, power-of-two lengths: one DFT
        case("fft", jnp.fft.fft, [("B", 8)], dtypes=[_C], expect=["DFT:Bx8x2"], counts={"DFT": 1}),
        case("ifft", jnp.fft.ifft, [(3, 16)], dtypes=[_C], expect=["DFT:3x16x2"]),
        case("rfft", jnp.fft.rfft, [("B", 16)], expect=["Unsqueeze -> DFT:Bx9x2"]),
        case("irfft", jnp.fft.irfft, [("B", 5)], dtypes=[_C], expect=["Reshape -> MatMul:Bx8"]),
        case("rfft_1024", jnp.fft.rfft, [(2, 1024)], expect=["DFT:2x513x2"]),
        case("irfft_1024", _irfft(1024), [(2, 513)], dtypes=[_C], expect=["DFT -> Gather:2x1024"]),
        # other lengths: one MatMul with the DFT matrix
        case("fft_7", jnp.fft.fft, [(2, 7)], dtypes=[_C], expect=["MatMul"], counts=_MATMUL_ONLY),
        case("ifft_12", jnp.fft.ifft, [("B", 12)], dtypes=[_C], counts=_MATMUL_ONLY),
        case("rfft_9", jnp.fft.rfft, [(3, 9)], expect=["MatMul -> Reshape:3x5x2"]),
        case("rfft_100", jnp.fft.rfft, [(2, 100)], counts=_MATMUL_ONLY),
        case("irfft_9", _irfft(9), [(3, 5)], dtypes=[_C], expect=["Reshape -> MatMul:3x9"]),
        case("irfft_10", jnp.fft.irfft, [(3, 6)], dtypes=[_C], counts=_MATMUL_ONLY),
        # past _MATMUL_MAX: DFT; float64 inverse as conj(DFT(conj x)) / n (ORT's 1/n is float32)
        case(
            "ifft_1030_f64",
            jnp.fft.ifft,
            [(2, 1030)],
            dtypes=[_C],
            variants=["f64"],  # float32 DFT of this length: relative error ~1e-4 (docs/numerics.md)
            expect=["Mul -> DFT -> Mul:2x1030x2"],
        ),
        case(
            "irfft_2050_f64",
            _irfft(2050),
            [(2, 1026)],
            dtypes=[_C],
            variants=["f64"],  # as ifft_1030_f64
            expect=["Concat -> Mul -> DFT -> Mul -> Gather:2x2050"],
        ),
        # padding and cropping of real inputs (lax.pad / slice before the transform)
        case("rfft_pad", lambda x: jnp.fft.rfft(x, n=16), [(2, 10)], expect=["Pad -> Unsqueeze"]),
        case("rfft_crop", lambda x: jnp.fft.rfft(x, n=6), [("B", 8)]),
        # several axes
        case("fft2", jnp.fft.fft2, [(2, 4, 8)], dtypes=[_C], counts={"DFT": 2}),
        case("ifft2_mixed", jnp.fft.ifft2, [(4, 6)], dtypes=[_C], expect=["DFT", "MatMul"]),
        case("fftn", jnp.fft.fftn, [(4, 6, 8)], dtypes=[_C]),
        case(
            "fftn_batch", lambda x: jnp.fft.fftn(x, axes=(1, 2, 3)), [("B", 2, 4, 8)], dtypes=[_C]
        ),
        case("ifftn", jnp.fft.ifftn, [(4, 8, 2)], dtypes=[_C], counts={"DFT": 3}),
        case("rfft2", jnp.fft.rfft2, [("B", 4, 8)], expect=["Unsqueeze -> DFT -> DFT:Bx4x5x2"]),
        case("rfftn", jnp.fft.rfftn, [(4, 6, 10)]),
        case("irfft2", jnp.fft.irfft2, [(4, 5)], dtypes=[_C], expect=["DFT -> Reshape -> MatMul"]),
        case(
            "irfft2_256", jnp.fft.irfft2, [(4, 129)], dtypes=[_C], expect=["DFT -> Concat -> DFT"]
        ),
        case("irfftn", lambda x: jnp.fft.irfftn(x, axes=(1, 2, 3)), [(2, 4, 6, 5)], dtypes=[_C]),
        # real in, real out
        case("rfft_irfft", lambda x: jnp.fft.irfft(jnp.fft.rfft(x)), [("B", 10)]),
        case("rfft_irfft_odd", _rfft_roundtrip(7), [(3, 7)]),
        case("rfftn_irfftn", lambda x: jnp.fft.irfftn(jnp.fft.rfftn(x)), [(3, 4, 8)]),
        case("vmap_irfft", jax.vmap(jnp.fft.irfft), [(3, 2, 5)], dtypes=[_C]),
        case("vmap_rfft2", jax.vmap(jnp.fft.rfft2), [("B", 4, 6)]),
        # the explicit DFT opsets: axis an attribute (17) or an input (20)
        case("opset17_fft", jnp.fft.fft, [("B", 8)], dtypes=[_C], opset=17, expect=["DFT"]),
        case("opset17_rfft2", jnp.fft.rfft2, [(2, 4, 8)], opset=17, expect=["DFT -> DFT"]),
        case("opset17_irfftn", jnp.fft.irfftn, [(4, 2, 5)], dtypes=[_C], opset=17),
        case(
            "opset20_ifft2", jnp.fft.ifft2, [("B", 8, 4)], dtypes=[_C], opset=20, counts={"DFT": 2}
        ),
        case("opset20_irfft", jnp.fft.irfft, [(3, 129)], dtypes=[_C], opset=20, expect=["DFT"]),
        # below opset 17: the MatMul form
        case("opset15_fft", jnp.fft.fft, [("B", 8)], dtypes=[_C], opset=15, counts=_MATMUL_ONLY),
        case("opset15_ifft", jnp.fft.ifft, [(3, 7)], dtypes=[_C], opset=15, expect=["MatMul"]),
        case(
            "opset15_rfft", jnp.fft.rfft, [("B", 64)], opset=15, expect=["MatMul -> Reshape:Bx33x2"]
        ),
        case("opset15_irfft", jnp.fft.irfft, [("B", 33)], dtypes=[_C], opset=15, expect=["MatMul"]),
        case(
            "opset15_fftn",
            lambda x: jnp.fft.fftn(x, axes=(1, 2, 3)),
            [("B", 3, 4, 5)],
            dtypes=[_C],
            opset=15,
            expect=["Transpose -> Reshape -> MatMul"],
            counts={"MatMul": 3, "DFT": 0},
        ),
        case("opset15_rfftn", jnp.fft.rfftn, [(4, 6, 8)], opset=15, counts={"MatMul": 3}),
        case("opset15_irfftn", jnp.fft.irfftn, [(3, 4, 5)], dtypes=[_C], opset=15),
        case("opset15_roundtrip", lambda x: jnp.fft.irfft(jnp.fft.rfft(x)), [("B", 12)], opset=15),
        # an empty batch: an empty result (a static one is a constant, the input unread)
        *[
            case(name, fn, [shape], dtypes=dtypes, opset=opset, no_unused_inputs=False)
            for name, fn, shape, dtypes, opset in (
                ("fft_empty_batch", jnp.fft.fft, (0, 6), [_C], None),
                ("rfft_empty_batch", jnp.fft.rfft2, (2, 0, 8, 5), None, None),
                ("opset15_irfft_empty_batch", jnp.fft.irfft, (3, 0, 5), [_C], 15),
            )
        ],
        case(  # a symbolic batch that is 0 at run time: no Reshape target with -1
            "fft_symbolic_batch_empty",
            jnp.fft.fft,
            [("B", 6)],
            dtypes=[_C],
            dim_sizes={"B": (2, 0, 3)},
        ),
    ]


# transformed axes of symbolic length: converted once, run at lengths that take the DFT form
# (powers of two) and the MatMul form (others), odd and even, and 1; the static variant at 6
_LENGTHS = {"B": (2, 3, 1, 2, 1), "T": (6, 1, 5, 8, 12)}
_HALVES = {"B": (2, 3, 1, 2), "T": (4, 2, 5, 8)}  # irfft of T bins: lengths 2 (T - 1)


def _irfft_same(x):
    """``rfft`` then the ``lax`` IRFFT of the input's own symbolic length (odd lengths too)."""
    return lax.fft(jnp.fft.rfft(x) * 2.0, lax.FftType.IRFFT, (x.shape[-1],))


def _symbolic():
    return [
        case("fft_symbolic", jnp.fft.fft, [("B", "T")], dtypes=[_C], dim_sizes=_LENGTHS),
        case("ifft_symbolic", jnp.fft.ifft, [("B", "T")], dtypes=[_C], dim_sizes=_LENGTHS),
        case("rfft_symbolic", jnp.fft.rfft, [("B", "T")], dim_sizes=_LENGTHS),
        case(
            "irfft_symbolic",
            jnp.fft.irfft,
            [("B", "T")],
            dtypes=[_C],
            dim_sizes=_HALVES,
            constraints=["T >= 2"],  # jnp.fft.irfft's length 2 (T - 1) must be positive
        ),
        case("irfft_symbolic_same", _irfft_same, [("B", "T")], dim_sizes=_LENGTHS),
        case(
            "fft2_symbolic",
            jnp.fft.fft2,
            [("B", "T")],
            dtypes=[_C],
            dim_sizes=_LENGTHS,
        ),
        case("rfft2_symbolic", jnp.fft.rfft2, [("B", "T")], dim_sizes=_LENGTHS),
        case(
            "opset17_ifft_symbolic",
            jnp.fft.ifft,
            [(2, "T")],
            dtypes=[_C],
            dim_sizes={"T": _LENGTHS["T"]},
            opset=17,
        ),
        case(
            "opset15_rfft_symbolic",
            jnp.fft.rfft,
            [("B", "T")],
            dim_sizes=_LENGTHS,
            opset=15,
            counts={"If": 0, "DFT": 0},
        ),
        case(
            "opset15_fft_symbolic",
            jnp.fft.fft,
            [("B", "T")],
            dtypes=[_C],
            dim_sizes=_LENGTHS,
            opset=15,
        ),
        case(
            "opset15_irfft_symbolic_same", _irfft_same, [("B", "T")], dim_sizes=_LENGTHS, opset=15
        ),
    ]


def _burgers(u0, *, steps=20, nu=0.05, dt=1e-3):
    """Viscous Burgers ``u_t = nu u_xx - u u_x`` on a periodic grid of ``[0, 2 pi)``.

    Pseudo-spectral derivatives (``rfft``, multiply by ``i k`` / ``-k^2``,
    ``irfft``), Heun's method (RK2), ``steps`` steps in a ``fori_loop``.
    """
    n = u0.shape[-1]
    k = np.fft.rfftfreq(n, 1.0 / n)
    ik = (1j * k).astype(jnp.result_type(u0.dtype, np.complex64))
    minus_k2 = -(k**2)

    def rhs(u):
        spectrum = jnp.fft.rfft(u)
        ux = jnp.fft.irfft(ik * spectrum)
        uxx = jnp.fft.irfft(minus_k2 * spectrum)
        return nu * uxx - u * ux

    def heun(_, u):
        k1 = rhs(u)
        return u + 0.5 * dt * (k1 + rhs(u + dt * k1))

    return lax.fori_loop(0, steps, heun, u0)


# these also need complex elementwise and layout rules (mul, abs, conj, pad, ...)
def _arithmetic():
    return [
        case("rfft_abs", lambda x: jnp.abs(jnp.fft.rfft(x)), [(3, 8)]),
        case("irfft_filter", lambda x: jnp.fft.irfft(jnp.fft.rfft(x) * jnp.arange(5.0)), [(3, 8)]),
        case("fft_of_real", lambda x: jnp.real(jnp.fft.ifft(jnp.fft.fft(x))), [(2, 6)]),
        case("fft2_power", lambda x: jnp.abs(jnp.fft.fft2(x)) ** 2, [(4, 6)]),
        case(
            "spectra_product",
            lambda x, y: jnp.fft.fft(x) * jnp.fft.fft(y),
            [(2, 8), (2, 8)],
            dtypes=[_C, _C],
        ),
        case("fft_ortho", lambda x: jnp.fft.fft(x, norm="ortho"), [(3, 8)], dtypes=[_C]),
        case("ifft_forward", lambda x: jnp.fft.ifft(x, norm="forward"), [(3, 6)], dtypes=[_C]),
        case("rfftn_ortho", lambda x: jnp.fft.rfftn(x, norm="ortho"), [(4, 6)]),
        case("hfft", jnp.fft.hfft, [(3, 5)], dtypes=[_C]),
        case("ihfft", jnp.fft.ihfft, [(3, 8)]),
        case("fft_pad", lambda x: jnp.fft.fft(x, n=12), [(2, 8)], dtypes=[_C]),
        case("fft_crop", lambda x: jnp.fft.fft(x, n=5), [("B", 8)], dtypes=[_C]),
        case("irfft_n", lambda x: jnp.fft.irfft(x, n=9), [(3, 5)], dtypes=[_C]),
        case("irfft_crop", lambda x: jnp.fft.irfft(x, n=6), [(3, 6)], dtypes=[_C]),
        case("grad_rfft", jax.grad(lambda x: jnp.sum(jnp.abs(jnp.fft.rfft(x)) ** 2)), [(8,)]),
        case(
            "grad_irfft",
            jax.grad(
                lambda x: jnp.sum(jnp.fft.irfft(jnp.fft.rfft(x) * 2.0) ** 2 * jnp.arange(8.0))
            ),
            [(8,)],
        ),
        case("opset15_rfft_abs", lambda x: jnp.abs(jnp.fft.rfft(x)), [("B", 8)], opset=15),
        case("burgers", _burgers, [(64,)], input_range=(-1.0, 1.0), expect=["Loop", "DFT"]),
        case("burgers_batch", _burgers, [("B", 64)], input_range=(-1.0, 1.0), opset=17),
        case(
            "opset15_burgers",
            _burgers,
            [(64,)],
            input_range=(-1.0, 1.0),
            opset=15,
            counts=_MATMUL_ONLY,
        ),
    ]


family.add_cases(lax.fft_p, lambda: _transforms() + _symbolic() + _arithmetic())


register = family.register
