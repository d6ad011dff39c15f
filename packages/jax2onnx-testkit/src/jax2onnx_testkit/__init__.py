"""jax2onnx-testkit: check conversions the way the jax2onnx packages do.

``check_case`` converts a case, runs the full ONNX checker, runs the model in
ONNX Runtime, compares with JAX at dtype-aware tolerances and applies the
case's ``expect_graph`` patterns. The pytest plugin parametrises any test that
takes a ``jax2onnx_case`` argument.
"""

from jax2onnx_testkit.check import CaseVariant, check_case, compare, variants_of
from jax2onnx_testkit.expect import expect_graph, op_counts

__all__ = ["CaseVariant", "check_case", "compare", "expect_graph", "op_counts", "variants_of"]
