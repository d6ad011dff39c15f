"""``compare``, ``variants_of`` and ``check_case`` called directly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime
import pytest

from jax2onnx.plugin import case
from jax2onnx_testkit import CaseVariant, check_case, compare, variants_of
from jax2onnx_testkit.check import _eval_dim
from jax2onnx_testkit.timing import PhaseClock

CASE = case("c", lambda x: x, [(3,)])


def test_declaring_an_empty_reason_is_an_error():
    with pytest.raises(ValueError, match="skip needs a reason"):
        case("s", jnp.tanh, [(3,)], skip="")
    with pytest.raises(ValueError, match="xfail needs a reason"):
        case("x", jnp.tanh, [(3,)], xfail="  ")


def test_integers_compare_exactly():
    want = np.array([1000, 2000, 3000], np.int32)
    got = want + np.array([0, 1, 0], np.int32)
    # a float tolerance would accept an off-by-one at this magnitude
    assert np.allclose(got, want, rtol=1e-3)
    with pytest.raises(AssertionError, match="output 0 differs from JAX .1 of 3 elements"):
        compare(CASE, [want], [got], "here")
    compare(CASE, [want], [want.copy()], "here")


def test_integer_tolerance_override_is_ignored():
    loose = case("c", lambda x: x, [(3,)], tolerances={"int32": (1.0, 10.0)})
    want = np.array([1, 2, 3], np.int32)
    with pytest.raises(AssertionError, match="differs"):
        compare(loose, [want], [want + 1], "here")


def test_bool_outputs_compare_exactly():
    want = np.array([True, False])
    with pytest.raises(AssertionError, match="differs"):
        compare(CASE, [want], [~want], "here")


def test_floats_within_tolerance():
    want = np.array([1.0, 2.0, 3.0], np.float32)
    compare(CASE, [want], [want + np.float32(1e-6)], "here")
    with pytest.raises(AssertionError, match=r"max abs diff 0\.001"):
        compare(CASE, [want], [want + np.float32(1e-3)], "here")


def test_case_tolerances_override_defaults():
    loose = case("c", lambda x: x, [(3,)], tolerances={"float32": (0.0, 1e-2)})
    want = np.array([1.0, 2.0, 3.0], np.float32)
    compare(loose, [want], [want + np.float32(1e-3)], "here")


def test_dtype_mismatch_fails():
    want = np.array([1.0, 2.0], np.float32)
    with pytest.raises(AssertionError, match="dtype float64, JAX float32"):
        compare(CASE, [want], [want.astype(np.float64)], "here")


def test_shape_mismatch_fails():
    want = np.zeros((2, 3), np.float32)
    with pytest.raises(AssertionError, match=r"shape \(3, 2\), JAX \(2, 3\)"):
        compare(CASE, [want], [np.zeros((3, 2), np.float32)], "here")


def test_output_count_mismatch_fails():
    want = np.zeros(2, np.float32)
    with pytest.raises(AssertionError, match="JAX gives 2 outputs, ONNX Runtime 1"):
        compare(CASE, [want, want], [want], "here")


def test_nan_in_the_same_places_passes():
    want = np.array([np.nan, 1.0, np.inf], np.float32)
    compare(CASE, [want], [want.copy()], "here")


def test_nan_in_different_places_fails():
    want = np.array([np.nan, 1.0], np.float32)
    with pytest.raises(AssertionError, match="NaN in 2 element"):
        compare(CASE, [want], [np.array([1.0, np.nan], np.float32)], "here")


def test_infinities_of_opposite_sign_fail():
    want = np.array([np.inf, 1.0], np.float32)
    with pytest.raises(AssertionError, match="max abs diff inf"):
        compare(CASE, [want], [-want], "here")


def test_complex_outputs_compare_the_imaginary_part():
    want = np.array([1 + 1j, 2 - 1j], np.complex64)
    compare(CASE, [want], [want.copy()], "here")
    with pytest.raises(AssertionError, match="differs"):
        compare(CASE, [want], [want.real.astype(np.complex64)], "here")


def test_eval_dim():
    assert _eval_dim(4, {}) == 4
    assert _eval_dim("B", {"B": 3}) == 3
    assert _eval_dim("2*B + 1", {"B": 3}) == 7
    assert _eval_dim("B//2", {"B": 6}) == 3
    with pytest.raises(ValueError, match="cannot evaluate"):
        _eval_dim("B.real", {"B": 3})
    with pytest.raises(ValueError, match=r"no size for \['C'\]"):
        _eval_dim("B + C", {"B": 3})


def test_variants_of():
    ids = [v.id for v in variants_of("p", "comp", case("t", jnp.tanh, [("B", 3)]))]
    assert ids == ["p/comp/t[f32-static]", "p/comp/t[f64-static]", "p/comp/t[f32-dynamic]"]
    ints = case("i", jnp.abs, [(3,)], dtypes=[np.int32])
    assert [v.id for v in variants_of("p", "comp", ints)] == ["p/comp/i[f32-static]"]
    only64 = case("o", jnp.tanh, [("N",)], variants=["f64"])
    assert [v.id for v in variants_of("p", "comp", only64)] == [
        "p/comp/o[f64-static]",
        "p/comp/o[f64-dynamic]",
    ]


def test_dynamic_variant_runs_at_each_size(monkeypatch):
    jax_shapes = []
    fed_shapes = []

    def fn(x):
        jax_shapes.append(tuple(x.shape))
        return jnp.tanh(x)

    run = onnxruntime.InferenceSession.run

    def recording_run(self, output_names, feed, *args, **kwargs):
        fed_shapes.append({k: v.shape for k, v in feed.items()})
        return run(self, output_names, feed, *args, **kwargs)

    monkeypatch.setattr(onnxruntime.InferenceSession, "run", recording_run)
    c = case("t", fn, [("B", 4)], dim_sizes={"B": (3, 2, 6)}, expect=["Tanh:Bx4"])
    static, _, dynamic = variants_of("demo", "comp", c)
    assert (static.precision, static.dynamic, dynamic.dynamic) == ("f32", False, True)

    model = check_case(static)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [3, 4]
    assert [list(f.values()) for f in fed_shapes] == [[(3, 4)]]
    assert set(jax_shapes) == {(3, 4)}

    jax_shapes.clear()
    fed_shapes.clear()
    model = check_case(dynamic)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["B", 4]
    assert [list(f.values()) for f in fed_shapes] == [[(2, 4)], [(6, 4)]]
    concrete = [s for s in jax_shapes if all(isinstance(d, int) for d in s)]
    assert concrete == [(2, 4), (6, 4)]
    assert (3, 4) not in jax_shapes


def test_check_case_applies_expect_graph():
    c = case("g", jnp.tanh, [("B", 2)], expect=["Tanh"])
    good = CaseVariant("demo", "comp", c, "f32", True)
    assert repr(good) == "CaseVariant(demo/comp/g[f32-dynamic])"
    check_case(good)
    bad = case("bad", jnp.tanh, [("B", 2)], expect=["Sigmoid"])
    with pytest.raises(AssertionError, match="no path 'Sigmoid'"):
        check_case(CaseVariant("demo", "comp", bad, "f32", True))


def test_wrong_values_name_the_variant_and_sizes(monkeypatch):
    run = onnxruntime.InferenceSession.run

    def off_at_b5(self, names, feed, *args, **kwargs):
        out = run(self, names, feed, *args, **kwargs)
        return [o + 1 for o in out] if feed["in_0"].shape[0] == 5 else out

    monkeypatch.setattr(onnxruntime.InferenceSession, "run", off_at_b5)
    variant = variants_of("demo", "comp", case("w", jnp.tanh, [("B", 2)]))[-1]
    with pytest.raises(AssertionError, match=r"demo/comp/w\[f32-dynamic\] at sizes \{'B': 5\}"):
        check_case(variant)


def test_dynamic_variant_with_a_single_size_still_runs(monkeypatch):
    fed = []
    run = onnxruntime.InferenceSession.run
    monkeypatch.setattr(
        onnxruntime.InferenceSession,
        "run",
        lambda self, names, feed, *a, **k: fed.append(feed) or run(self, names, feed, *a, **k),
    )
    c = case("one", jnp.tanh, [("B", 2)], dim_sizes={"B": (4,)})
    check_case(variants_of("demo", "comp", c)[-1])
    assert [f["in_0"].shape for f in fed] == [(4, 2)]


def test_dim_sizes_of_unequal_length_are_an_error():
    c = case("u", jnp.add, [("B", 2), ("N", 2)], dim_sizes={"B": (3, 2, 6, 7)})
    with pytest.raises(ValueError, match="same number of sizes"):
        check_case(variants_of("demo", "comp", c)[-1])


def test_64_bit_integer_inputs_need_the_f64_variant():
    c = case("i64", jnp.negative, [(3,)], dtypes=[np.int64])
    with pytest.raises(ValueError, match="needs variants"):
        check_case(variants_of("demo", "comp", c)[0])
    c64 = case("i64", jnp.negative, [(3,)], dtypes=[np.int64], variants=["f64"])
    model = check_case(variants_of("demo", "comp", c64)[0])
    assert model.graph.output[0].type.tensor_type.elem_type == 7  # INT64


def _phases(variant) -> dict[str, float]:
    clock = PhaseClock()
    check_case(variant, clock=clock)
    return clock.times


def test_float_references_are_compiled_and_half_precision_runs_op_by_op():
    f32, f64, bf16 = variants_of(
        "demo", "comp", case("t", jnp.tanh, [(2, 3)], variants=("f32", "f64", "bf16"))
    )
    assert "jax.op_by_op" not in _phases(f32)
    assert "jax.op_by_op" not in _phases(f64)
    assert "jax.op_by_op" in _phases(bf16)


def test_functions_jit_cannot_take_run_op_by_op():
    # the output's size depends on the data: jax.jit refuses it, op by op runs it
    c = case("nz", lambda x: jnp.nonzero(x > 0.5)[0], [(8,)], variants=("f32",))
    assert "jax.op_by_op" in _phases(variants_of("demo", "comp", c)[0])


def test_a_miss_of_the_compiled_reference_is_judged_op_by_op(monkeypatch):
    jit = jax.jit
    monkeypatch.setattr(
        jax, "jit", lambda f: lambda *a, **k: jax.tree.map(lambda y: y + 1, jit(f)(*a, **k))
    )
    c = case("t", jnp.tanh, [(2, 3)], variants=("f32",))
    assert "jax.op_by_op" in _phases(variants_of("demo", "comp", c)[0])
    # and op by op's verdict stands: a miss of both is a failure
    monkeypatch.setattr(
        onnxruntime.InferenceSession, "run", lambda *a, **k: [np.zeros((2, 3), np.float32)]
    )
    with pytest.raises(AssertionError, match="differs from JAX"):
        check_case(variants_of("demo", "comp", c)[0])
