"""float16 and bfloat16 results bit for bit against JAX (op by op, on CPU).

The testkit compares half-precision variants at rtol 2e-2 (bfloat16) / 1e-2 (float16),
which hides a difference of one bfloat16/float16 step. Here each op runs over a dense
grid of inputs (every finite value of the type, for the unary ops) and must give JAX's
bits, the sign of zero included (every NaN counts as equal).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from jax import lax

from jax2onnx import to_onnx
from jax2onnx.plugin import run_session

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALF = [pytest.param(BF16, id="bf16"), pytest.param(F16, id="f16")]
# XLA's CPU backend flushes subnormal float32 operands and results to zero. Every
# bfloat16 subnormal is a float32 subnormal, so JAX computes bfloat16 ops of such
# values (and results that pass below 2^-126, asin(x) = 2 * (x / 2) ...) as of zero
# (its cbrt of a subnormal is even negative). ONNX Runtime does not flush: bfloat16
# inputs of magnitude below 2^-124 are left out. float16 subnormals are float32 normals.
BF16_FLOOR = 2.0**-124


def _run(fn, *args):
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    model = to_onnx(fn, specs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return run_session(session, dict(zip(names, args, strict=True)))


# The suite runs XLA with faster compiles (conftest.py). Its classic emitters compute
# float16 log, log1p and cbrt differently from the default ones (60% of cbrt's float16
# results move a step), so each reference is compiled with the default emitters, whose
# numbers JAX gives. The optimisation level the suite sets (0) changes none of the
# results here (checked against XLA's default, 3, which compiles slower).
XLA_DEFAULTS = {"xla_cpu_use_fusion_emitters": True}


def _jax(fn, *args):
    """JAX's outputs with XLA's default CPU settings. Each ``fn`` here is one primitive,
    so this is what JAX computes op by op, rounding as the exported graph rounds."""
    args = [jnp.asarray(a) for a in args]
    compiled = jax.jit(fn).lower(*args).compile(compiler_options=XLA_DEFAULTS)
    return [np.asarray(o) for o in jax.tree_util.tree_leaves(compiled(*args))]


def _assert_same_bits(got, want, inputs, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.kind in "iub":
        bad = got != want
    else:
        width = np.uint16 if got.dtype.itemsize == 2 else np.uint32
        both_nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
        bad = (got.view(width) != want.view(width)) & ~both_nan
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        shown = [
            (
                float(inputs.ravel()[j]) if inputs is not None else j,
                float(got.ravel()[j]),
                float(want.ravel()[j]),
            )
            for j in i
        ]
        raise AssertionError(
            f"{what}: {bad.sum()} of {bad.size} differ from JAX (input, ONNX, JAX): {shown}"
        )


def _every_value(dtype, low=-np.inf, high=np.inf):
    """Every finite value of a 16-bit float type in [low, high], with +-inf, NaN, +-0."""
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    wide = values.astype(np.float32)
    keep = np.isfinite(wide) & (wide >= low) & (wide <= high)
    if dtype == BF16:
        keep &= (np.abs(wide) >= BF16_FLOOR) | (wide == 0)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32).astype(dtype)
    return np.concatenate([values[keep], specials])


# every value: the inverse functions over the whole range (NaN outside their domain)
UNARY = [
    pytest.param(lax.asin, id="asin"),
    pytest.param(lax.acos, id="acos"),
    pytest.param(lax.acosh, id="acosh"),
    pytest.param(lax.asinh, id="asinh"),
    pytest.param(lax.atanh, id="atanh"),
    pytest.param(lax.cbrt, id="cbrt"),
]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("fn", UNARY)
def test_unary_every_value(fn, dtype):
    x = _every_value(dtype)
    (got,) = _run(fn, x)
    (want,) = _jax(fn, x)
    _assert_same_bits(got, want, x, f"{fn.__name__} {dtype}")


def _scan_input(rng, shape, dtype, product):
    if product:  # products of values near 1 stay finite and keep rounding
        x = rng.uniform(0.8, 1.25, shape)
    else:
        x = rng.standard_normal(shape) * 4
    special = rng.random(shape) < 0.03
    x[special] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 0.0, 60000.0], special.sum())
    return x.astype(np.float32).astype(dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("prim", [lax.cumsum, lax.cumprod], ids=["cumsum", "cumprod"])
def test_cumulative(prim, dtype):
    """Lengths below XLA's block of 16, past it, and past 16 blocks (two levels), each
    forwards and in reverse (one model)."""
    rng = np.random.default_rng(0)
    lengths = (8, 33, 300)
    xs = [_scan_input(rng, (6, n), dtype, prim is lax.cumprod) for n in lengths]

    def fn(*xs):
        return [prim(x, axis=1, reverse=r) for x in xs for r in (False, True)]

    got, want = _run(fn, *xs), _jax(fn, *xs)
    what = [f"{prim.__name__} n={n} reverse={r}" for n in lengths for r in (False, True)]
    for g, w, name in zip(got, want, what, strict=True):
        _assert_same_bits(g, w, None, name)


def test_cumulative_middle_axis():
    rng = np.random.default_rng(1)
    x = _scan_input(rng, (3, 40, 2), BF16, False)

    def fn(x):
        return [lax.cumsum(x, axis=1, reverse=r) for r in (False, True)]

    for g, w, r in zip(_run(fn, x), _jax(fn, x), (False, True), strict=True):
        _assert_same_bits(g, w, None, f"cumsum axis=1 of (3, 40, 2) reverse={r}")


def _tied(rng, shape, dtype, nan):
    """Few distinct values (many ties, 0.0 and -0.0 among them), NaNs if asked."""
    x = rng.choice(np.array([0.0, -0.0, 1.0, 2.0, 3.0, -np.inf]), shape)
    if nan:
        x[rng.random(shape) < 0.1] = np.nan
    return x.astype(np.float32).astype(dtype)


APPROX = [
    pytest.param(lax.approx_max_k, id="max"),
    pytest.param(lax.approx_min_k, id="min"),
]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("select", APPROX)
def test_approx_top_1(select, dtype):
    """k = 1: XLA reduces (value, index) pairs, the last of equal extremes winning and a
    NaN dropped by whatever follows it; indices and values must be JAX's."""
    rng = np.random.default_rng(2)
    cases = [(n, nan) for n in (1, 5, 1000) for nan in (False, True)]
    xs = [_tied(rng, (8, n), dtype, nan) for n, nan in cases]

    def fn(*xs):
        return [select(x, 1) for x in xs]

    got, want = _run(fn, *xs), _jax(fn, *xs)
    what = [f"{select.__name__}(k=1) n={n} nan={nan} {o}" for n, nan in cases for o in "vi"]
    for g, w, name in zip(got, want, what, strict=True):
        _assert_same_bits(g, w, None, name)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("select", APPROX)
def test_approx_top_k_ties(select, dtype):
    """k > 1 without NaN. JAX on CPU sorts with C++ ``std::sort``, not a stable sort: up to
    16 elements that is an insertion sort, which keeps equal values in index order, as
    the export does, so indices are JAX's; beyond 16 the order of ties is the introsort's
    own, which no ONNX op reproduces: the values (and that the indices point at them) are
    checked there."""
    rng = np.random.default_rng(3)
    lengths = (8, 16, 40)
    xs = [_tied(rng, (8, n), dtype, False) for n in lengths]

    def fn(*xs):
        return [select(x, 3) for x in xs]

    got, want = _run(fn, *xs), _jax(fn, *xs)
    for i, (n, x) in enumerate(zip(lengths, xs, strict=True)):
        values, idx = got[2 * i], got[2 * i + 1]
        what = f"{select.__name__}(k=3) n={n}"
        _assert_same_bits(values, want[2 * i], None, f"{what} values")
        picked = np.take_along_axis(x, idx.astype(np.int64), axis=1)
        _assert_same_bits(picked, values, None, f"{what} x[indices]")
        if n <= 16:
            _assert_same_bits(idx, want[2 * i + 1], None, f"{what} indices")
