"""``lax.fft_p`` (``jnp.fft.*``) and the real-valued ``jnp.fft`` helpers.

Every form of ``lax.fft_p`` has a complex side: ``FFT``/``IFFT`` map complex
to complex, ``RFFT`` real to complex, ``IRFFT`` complex to real. ONNX Runtime
has no complex tensor type at all (1.31 refuses ``tensor(complex64)`` even
for ``Identity`` and ``Reshape``; ONNX ``DFT`` itself works on a trailing
``[..., 2]`` real/imaginary axis), and the converter stamps every value with
its JAX dtype, so a complex value in the jaxpr cannot be represented in an
ONNX Runtime graph. The lowering therefore refuses ``fft`` with an error that
names the primitive, the form and what to do instead; functions that use FFTs
only internally (``abs(rfft(x))``, ``irfft(rfft(x) * h)``) fail the same way,
because their complex intermediates flow through ``abs``/``mul``/``real``.
The cases below record that (strict xfails) and prove the real ``jnp.fft``
helpers (``fftfreq``, ``rfftfreq``, ``fftshift``, ``ifftshift``) convert
through the lax lowerings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case

family = Family("lax")


_FORMS = {0: "FFT", 1: "IFFT", 2: "RFFT", 3: "IRFFT"}
_COMPLEX = (
    "complex intermediate: ONNX Runtime has no complex tensor type, so lax.fft (every form "
    "has a complex input or output) cannot be exported"
)


def _form(fft_type) -> str:
    name = getattr(fft_type, "name", None)
    return name or _FORMS.get(int(fft_type), str(fft_type))


@family.lowering(
    lax.fft_p,
    cases=[
        case("rfft_abs", lambda x: jnp.abs(jnp.fft.rfft(x)), [(3, 8)], xfail=_COMPLEX),
        case(
            "irfft_filter",
            lambda x: jnp.fft.irfft(jnp.fft.rfft(x) * jnp.arange(5.0)),
            [(3, 8)],
            xfail=_COMPLEX,
        ),
        case(
            "fft_roundtrip_real",
            lambda x: jnp.real(jnp.fft.ifft(jnp.fft.fft(x))),
            [(2, 6)],
            xfail=_COMPLEX,
        ),
        case("fft2_power", lambda x: jnp.abs(jnp.fft.fft2(x)) ** 2, [(4, 6)], xfail=_COMPLEX),
        case("rfftn_abs", lambda x: jnp.abs(jnp.fft.rfftn(x)), [(2, 4, 6)], xfail=_COMPLEX),
    ],
)
def fft(ctx, x, *, fft_type, fft_lengths):
    """Refused: every fft form has a complex side, which ONNX Runtime cannot hold."""
    aval_in, aval_out = ctx.avals_in[0], ctx.avals_out[0]
    raise ctx.error(
        f"lax.fft ({_form(fft_type)}, fft_lengths={tuple(fft_lengths)}, "
        f"{aval_in.str_short()} -> {aval_out.str_short()}) cannot be exported: ONNX Runtime "
        "has no complex tensor type, so complex values (jnp.fft.* results, complex "
        "arithmetic on them) cannot live in the graph. Compute the transform in real "
        "arithmetic instead, e.g. the real and imaginary parts of a length-N real DFT as "
        "x @ cos(2*pi*k*n/N) and -(x @ sin(2*pi*k*n/N)) with constant matrices, and keep "
        "complex numbers out of the exported function. The real helpers jnp.fft.fftfreq, "
        "rfftfreq, fftshift and ifftshift convert."
    )


_GRID = np.arange(24.0).reshape(4, 6)
family.add_cases(
    "jnp.fft_helpers",
    [
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
