"""The kernel table says what ONNX Runtime computes exactly, and rules that read it avoid the rest.

ONNX Runtime registers ``Shrink`` for every numeric type but computes it in
float32: a float64 ``Shrink`` runs and loses the last bits, an int32 one
overflows. The table must leave those types out, so that a rule declaring
``native_dtypes=kernel_dtypes("Shrink")`` inlines its fallback for them.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from jax2onnx.plugin import Rules, case, has_kernel, kernel_dtypes, native_kernel, run_session


def _schema_types(op_type: str) -> list[np.dtype]:
    """The tensor dtypes ONNX's schema of ``op_type`` admits (Shrink: no bfloat16)."""
    (constraint,) = onnx.defs.get_schema(op_type).type_constraints
    names = [t[len("tensor(") : -1] for t in constraint.allowed_type_strs]
    return [np.dtype({"float": "float32", "double": "float64"}.get(n, n)) for n in names]


_SHRINK_TYPES = _schema_types("Shrink")


def _shrink(dtype: np.dtype, x: np.ndarray, lambd: float) -> np.ndarray:
    """ONNX Runtime's ``Shrink(x, lambd=lambd, bias=lambd)`` on ``x`` of ``dtype``."""
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    node = helper.make_node("Shrink", ["x"], ["y"], lambd=lambd, bias=lambd)
    graph = helper.make_graph(
        [node],
        "shrink",
        [helper.make_tensor_value_info("x", elem, [None])],
        [helper.make_tensor_value_info("y", elem, [None])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return run_session(session, {"x": x})[0]


def _probe(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, float]:
    """Inputs whose Shrink float32 cannot compute exactly unless ``dtype`` fits in float32."""
    if dtype.kind == "f":
        tiny = 2.0 ** -(ml_dtypes.finfo(dtype).nmant - 2)  # 2**-50 for float64
        x = np.array([1 + tiny, -(1 + tiny), 0.25], dtype)
        return x, np.array([0.5 + tiny, -(0.5 + tiny), 0.0], dtype), 0.5
    info = np.iinfo(dtype)
    x = np.array([info.max, info.min, 1], dtype)  # int32: 2**31 - 1 is not a float32
    want = [info.max - 1, info.min + 1 if info.min else 0, 0]
    return x, np.array(want, dtype), 1.0


@pytest.mark.parametrize("dtype", _SHRINK_TYPES, ids=str)
def test_the_table_lists_the_types_onnx_runtime_computes_shrink_exactly_in(dtype):
    x, want, lambd = _probe(dtype)
    got = _shrink(dtype, x, lambd)
    exact = got.dtype == dtype and np.array_equal(got, want)
    assert native_kernel("Shrink", dtype) == exact, (dtype, got, want)


def test_float64_shrink_has_no_kernel_and_float32_has():
    assert not has_kernel("Shrink", np.float64)
    assert has_kernel("Shrink", np.float32)
    assert np.dtype(np.float64) not in kernel_dtypes("Shrink")


def test_no_bfloat16_shrink_kernel_as_onnx_has_none():
    """ONNX Runtime registers one, but a model with a bfloat16 Shrink is invalid ONNX."""
    schema = onnx.defs.get_schema("Shrink", 26, "")
    allowed = {t for c in schema.type_constraints for t in c.allowed_type_strs}
    assert "tensor(bfloat16)" not in allowed and "tensor(float16)" in allowed
    assert not native_kernel("Shrink", ml_dtypes.bfloat16)
    assert native_kernel("Shrink", np.float16)


# --- a rule that reads the table: float64 inlines its fallback ----------------

rules = Rules("kernels_test")
jax2onnx_rules = [rules]


def soft_shrink(x, lambd=0.5):
    return jnp.where(x > lambd, x - lambd, jnp.where(x < -lambd, x + lambd, 0.0))


soft_shrink_p = rules.primitive("soft_shrink", impl=soft_shrink, batching="elementwise")
_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64))
# float32 rounding shows here, far beyond the float64 tolerance (1e-10): in float32
# 1 + 2**-26 is 1 and 0.5 + 2**-30 is 0.5, so a Shrink would give 0.5 and 0
_X64 = np.array([[1 + 2**-26, -(1 + 2**-26), 3 + 1e-8], [0.25, 0.5 + 2**-30, -2.0]])


@rules.lowering(
    soft_shrink_p,
    native_dtypes=kernel_dtypes("Shrink") & _FLOATS,
    cases=lambda: [
        case(
            "soft_shrink",
            lambda x: soft_shrink_p.bind(x, lambd=0.5),
            [("B", 3)],
            variants=["f32", "bf16", "f16"],  # bfloat16: Cast, a float32 Shrink, Cast
            expect=["Shrink:Bx3"],
        ),
        case(
            "soft_shrink_float64",
            lambda x: soft_shrink_p.bind(x, lambd=0.5),
            [_X64],
            variants=["f64"],
            counts={"Shrink": 0},
        ),
    ],
)
def lower_soft_shrink(ctx, x, *, lambd):
    return ctx.op.Shrink(x, bias=float(lambd), lambd=float(lambd))


def test_case(jax2onnx_case, check_case):
    check_case(jax2onnx_case)
