"""jax2onnx-testkit: check conversions the way the jax2onnx packages do.

``check_case`` converts a case, runs the full ONNX checker, runs the model in
ONNX Runtime, compares with JAX at dtype-aware tolerances and applies the
case's ``expect_graph`` patterns. The pytest plugin parametrises any test that
takes a ``jax2onnx_case`` argument.

The names below are imported on first access (a module ``__getattr__``): the
``jax2onnx`` entry point loads :mod:`jax2onnx_testkit.plugin` with every
conversion's plugin set, and that must not import ONNX.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jax2onnx_testkit.check import CaseVariant, check_case, compare, variants_of
    from jax2onnx_testkit.expect import expect_graph, op_counts
    from jax2onnx_testkit.passes import passes_off

_LAZY = {
    "CaseVariant": "jax2onnx_testkit.check",
    "check_case": "jax2onnx_testkit.check",
    "compare": "jax2onnx_testkit.check",
    "variants_of": "jax2onnx_testkit.check",
    "expect_graph": "jax2onnx_testkit.expect",
    "op_counts": "jax2onnx_testkit.expect",
    "passes_off": "jax2onnx_testkit.passes",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jax2onnx_testkit' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "CaseVariant",
    "check_case",
    "compare",
    "expect_graph",
    "op_counts",
    "passes_off",
    "variants_of",
]
