"""``lax.linalg.svd(x, subset_by_index=(lo, hi))`` against JAX's full ``svd``, sliced.

A dedicated test rather than ``case(...)`` next to the rule, as for ``eigh``'s
subset (``test_eigh_subset.py``): the testkit compares a converted case with
JAX evaluating the same function, and JAX's CPU backend cannot evaluate
``subset_by_index`` (``NotImplementedError: subset_by_index not implemented for
CPU and GPU``). The honest reference is what the option means (JAX's TPU
implementation computes exactly this): the singular values of the full ``svd``,
descending, sliced to ``[lo, hi)``, with the matching columns of ``u`` and rows
of ``vt``. Singular vectors are defined up to a sign (a unit phase for complex
matrices), so they are compared after fixing it, and also checked to satisfy
``A v_i = s_i u_i`` and to be orthonormal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
from jax import lax

from jax2onnx import to_onnx
from jax2onnx.plugin import complex_array

TOLERANCE = {np.float32: 2e-5, np.float64: 1e-10, np.complex64: 2e-5, np.complex128: 1e-10}


def _spread(shape, dtype, seed: int) -> np.ndarray:
    """Matrices with singular values well apart (so each singular vector is defined)."""
    rng = np.random.default_rng(seed)
    *batch, m, n = shape
    k = min(m, n)
    out = []
    for _ in range(int(np.prod(batch, dtype=int))):
        u = np.linalg.qr(rng.standard_normal((m, k)) + _imag(rng, (m, k), dtype))[0]
        v = np.linalg.qr(rng.standard_normal((n, k)) + _imag(rng, (n, k), dtype))[0]
        s = np.linspace(4.0, 0.5, k) + rng.uniform(-0.1, 0.1, k)
        out.append((u * s) @ v.conj().T)
    return np.stack(out).reshape(shape).astype(dtype)


def _imag(rng, shape, dtype):
    return 1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else 0.0


def _run(fn, shape, x: np.ndarray) -> list[np.ndarray]:
    """Convert ``fn`` for inputs of ``shape`` (may be symbolic) and ``x``'s dtype, run it
    on ``x`` (a complex ``x`` fed as its ``[..., 2]`` parts)."""
    wide = x.dtype in (np.float64, np.complex128)
    with jax.enable_x64(wide):
        model = to_onnx(fn, [jax.ShapeDtypeStruct(shape, x.dtype)], enable_double_precision=wide)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fed = np.stack([x.real, x.imag], -1) if x.dtype.kind == "c" else x
    return session.run(None, {session.get_inputs()[0].name: fed})


def _complex(out: np.ndarray) -> np.ndarray:
    return complex_array(out, np.complex128 if out.dtype == np.float64 else np.complex64)


def _phased(u: np.ndarray, vt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``u`` and ``vt`` with each column of ``u`` (row of ``vt``) turned by the unit phase
    making the largest-magnitude entry of the column real and positive."""
    pick = np.argmax(np.abs(u), axis=-2)[..., None, :]
    entry = np.take_along_axis(u, pick, axis=-2)
    phase = entry / np.abs(entry)
    return u / phase, vt * np.swapaxes(phase, -1, -2)


def _check(x, got, lo, hi, compute_uv=True):
    tol = TOLERANCE[x.dtype.type]
    complex_input = x.dtype.kind == "c"
    with jax.enable_x64(x.dtype in (np.float64, np.complex128)):
        u, s, vt = (np.asarray(a) for a in lax.linalg.svd(x, full_matrices=False))
    real_dtype = x.real.dtype
    got_s = got[1] if compute_uv else got[0]
    assert got_s.dtype == real_dtype
    assert got_s.shape == (*x.shape[:-2], hi - lo)
    np.testing.assert_allclose(got_s, s[..., lo:hi], rtol=tol, atol=tol)
    if not compute_uv:
        assert len(got) == 1
        return
    got_u, got_vt = (_complex(got[i]) if complex_input else got[i] for i in (0, 2))
    m, n = x.shape[-2:]
    assert got_u.shape == (*x.shape[:-2], m, hi - lo)
    assert got_vt.shape == (*x.shape[:-2], hi - lo, n)
    want_u, want_vt = _phased(u[..., :, lo:hi], vt[..., lo:hi, :])
    got_u, got_vt = _phased(got_u, got_vt)
    np.testing.assert_allclose(got_u, want_u, atol=20 * tol)
    np.testing.assert_allclose(got_vt, want_vt, atol=20 * tol)
    # A v_i = s_i u_i, and the vectors orthonormal
    np.testing.assert_allclose(
        x @ np.swapaxes(got_vt, -1, -2).conj(), got_u * got_s[..., None, :], atol=50 * tol
    )
    eye = np.broadcast_to(np.eye(hi - lo), (*x.shape[:-2], hi - lo, hi - lo))
    np.testing.assert_allclose(np.swapaxes(got_u, -1, -2).conj() @ got_u, eye, atol=20 * tol)
    np.testing.assert_allclose(got_vt @ np.swapaxes(got_vt, -1, -2).conj(), eye, atol=20 * tol)


def _svd(subset, compute_uv=True):
    def fn(a):
        return lax.linalg.svd(a, full_matrices=False, compute_uv=compute_uv, subset_by_index=subset)

    return fn


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 4), (4, 4), (3, 6)], ids=["tall", "square", "wide"])
@pytest.mark.parametrize("subset", [(0, 2), (1, 3), (2, 3)])
def test_svd_subset_is_the_full_svd_sliced(subset, shape, dtype):
    lo, hi = subset
    x = _spread(shape, dtype, seed=lo * 7 + hi)
    _check(x, _run(_svd(subset), shape, x), lo, hi)


@pytest.mark.parametrize("subset", [(0, 1), (1, 4)])
def test_svd_subset_values_only(subset):
    lo, hi = subset
    x = _spread((6, 4), np.float32, seed=hi)
    got = _run(_svd(subset, compute_uv=False), x.shape, x)
    _check(x, got, lo, hi, compute_uv=False)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_svd_subset_of_a_complex_matrix(dtype):
    x = _spread((5, 3), dtype, seed=4)
    _check(x, _run(_svd((1, 3)), x.shape, x), 1, 3)


def test_svd_subset_with_a_symbolic_batch():
    for batch in (1, 3):
        x = _spread((batch, 6, 4), np.float32, seed=batch)
        _check(x, _run(_svd((1, 3)), ("B", 6, 4), x), 1, 3)


def test_svd_subset_with_symbolic_matrix_sizes_and_a_constraint():
    """Symbolic ``M x N`` with ``M, N >= 3`` promised: ``hi = 3`` fits every size."""
    dims = jax.export.symbolic_shape("M, N", constraints=["M >= 3", "N >= 3"])
    model = to_onnx(_svd((1, 3)), [jax.ShapeDtypeStruct(dims, np.float32)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in [(5, 3), (3, 5), (4, 4)]:
        x = _spread(shape, np.float32, seed=sum(shape))
        _check(x, session.run(None, {session.get_inputs()[0].name: x}), 1, 3)


def test_svd_subset_of_the_whole_range_is_the_full_svd():
    x = _spread((4, 3), np.float32, seed=9)
    got = _run(lambda a: lax.linalg.svd(a, full_matrices=False, subset_by_index=(0, 3)), x.shape, x)
    _check(x, got, 0, 3)


def test_jax_cpu_still_cannot_evaluate_the_subset():
    """If this starts failing, JAX computes the subset itself: make these cases."""
    x = _spread((4, 3), np.float32, seed=0)
    with pytest.raises(NotImplementedError, match="subset_by_index"):
        lax.linalg.svd(x, full_matrices=False, subset_by_index=(0, 2))


def test_jnp_linalg_svd_passes_its_subset_through():
    x = _spread((5, 4), np.float32, seed=11)
    got = _run(
        lambda a: tuple(jnp.linalg.svd(a, full_matrices=False, subset_by_index=(1, 3))),
        x.shape,
        x,
    )
    _check(x, got, 1, 3)
