"""``lax.linalg.eigh(x, subset_by_index=(lo, hi))`` against JAX's full ``eigh``, sliced.

This is a dedicated test rather than a ``case(...)`` next to the rule because
the testkit compares a converted case with JAX evaluating the same function,
and JAX's CPU backend cannot evaluate ``subset_by_index`` (it raises
``NotImplementedError: subset_by_index not supported on CPU and GPU``). The
honest reference is what the option means: JAX's full ``eigh`` (eigenvalues
ascending) sliced to ``[lo, hi)``. Eigenvectors are defined up to sign, so
they are compared after making the largest-magnitude entry of each column
positive, and also checked to satisfy ``A v = v diag(w)`` and ``v^T v = I``.
"""

from __future__ import annotations

import jax
import numpy as np
import onnxruntime as ort
import pytest
from jax import lax

from jax2onnx import to_onnx

TOLERANCE = {np.float32: 1e-5, np.float64: 1e-10}


def _spread(n: int, batch: int, dtype, seed: int) -> np.ndarray:
    """Symmetric matrices with eigenvalues well apart (so each eigenvector is defined)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(batch):
        q, r = np.linalg.qr(rng.standard_normal((n, n)))
        q = q * np.sign(np.diag(r))
        values = np.linspace(-3.0, 4.0, n) + rng.uniform(-0.2, 0.2, n)
        out.append((q * values) @ q.T)
    return np.stack(out).astype(dtype)


def _signed(v: np.ndarray) -> np.ndarray:
    """Each column times the sign of its largest-magnitude entry."""
    pick = np.argmax(np.abs(v), axis=-2)[..., None, :]
    return v * np.sign(np.take_along_axis(v, pick, axis=-2))


def _run(fn, shape, x: np.ndarray) -> list[np.ndarray]:
    """Convert ``fn`` for inputs of ``shape`` (may be symbolic) and run it on ``x``."""
    wide = x.dtype == np.float64
    with jax.enable_x64(wide):
        spec = shape if not wide else jax.ShapeDtypeStruct(shape, x.dtype)
        model = to_onnx(fn, [spec], enable_double_precision=wide)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})


def _check(x, got_v, got_w, lo, hi, lower=True):
    tol = TOLERANCE[x.dtype.type]
    with jax.enable_x64(x.dtype == np.float64):
        v, w = (np.asarray(a) for a in lax.linalg.eigh(x, lower=lower, symmetrize_input=False))
    assert got_w.dtype == x.dtype and got_v.dtype == x.dtype
    assert got_w.shape == (*x.shape[:-1][:-1], hi - lo)
    assert got_v.shape == (*x.shape[:-1], hi - lo)
    np.testing.assert_allclose(got_w, w[..., lo:hi], rtol=tol, atol=tol)
    np.testing.assert_allclose(_signed(got_v), _signed(v[..., lo:hi]), rtol=tol, atol=tol)
    half, strict = (np.tril(x), np.tril(x, -1)) if lower else (np.triu(x), np.triu(x, 1))
    sym = half + np.swapaxes(strict, -1, -2)  # the symmetric matrix eigh reads
    np.testing.assert_allclose(sym @ got_v, got_v * got_w[..., None, :], atol=20 * tol)
    eye = np.swapaxes(got_v, -1, -2) @ got_v
    np.testing.assert_allclose(eye, np.broadcast_to(np.eye(hi - lo), eye.shape), atol=10 * tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("subset", [(0, 2), (1, 4), (3, 5), (2, 3), (0, 5)])
def test_eigh_subset_is_the_full_eigh_sliced(subset, dtype):
    lo, hi = subset
    x = _spread(5, 1, dtype, seed=lo * 7 + hi)[0]

    def fn(a):
        return lax.linalg.eigh(a, symmetrize_input=False, subset_by_index=subset)

    got_v, got_w = _run(fn, x.shape, x)
    _check(x, got_v, got_w, lo, hi)


def test_eigh_subset_reads_the_upper_triangle_with_lower_false():
    x = _spread(4, 1, np.float32, seed=3)[0]
    x = x + np.tril(np.full((4, 4), 9.0, np.float32), -1)  # garbage below the diagonal

    def fn(a):
        return lax.linalg.eigh(a, lower=False, symmetrize_input=False, subset_by_index=(1, 3))

    got_v, got_w = _run(fn, x.shape, x)
    _check(x, got_v, got_w, 1, 3, lower=False)


def test_eigh_subset_with_a_symbolic_batch():
    def fn(a):
        return lax.linalg.eigh(a, symmetrize_input=False, subset_by_index=(2, 4))

    model_spec = ("B", 6, 6)
    for batch in (1, 3):
        x = _spread(6, batch, np.float32, seed=batch)
        got_v, got_w = _run(fn, model_spec, x)
        _check(x, got_v, got_w, 2, 4)


def test_jax_cpu_still_cannot_evaluate_the_subset():
    """If this starts failing, JAX computes the subset itself: make these cases."""
    x = _spread(3, 1, np.float32, seed=0)[0]
    with pytest.raises(NotImplementedError, match="subset_by_index"):
        lax.linalg.eigh(x, subset_by_index=(0, 2))
