"""The plugin author's API: everything a jax2onnx plugin imports.

A plugin imports nothing else of jax2onnx (no ``jax2onnx.<module>``) and no
private name of another plugin; the suite checks this for our distributions.
``LoweringContext``, ``SubgraphBuilder``, ``at_conversion``,
``batch_at_front``, ``call_arguments``, ``has_kernel``, ``kernel_dtype``,
``kernel_dtypes``, ``module_paths``, ``native_kernel``, ``new_dimension``, ``run_session``
and ``stored_array`` are imported on
first access (a module ``__getattr__``), so importing this module does not
load the converter.

Example:
    ```python
    from jax import lax
    from jax2onnx.plugin import Family, Rules, case, hookimpl

    family = Family("myops")

    # cases are given as a function: built when the testkit asks, not at load
    @family.lowering(lax.tanh_p, cases=lambda: [case("tanh", lax.tanh, [(3,)], expect=["Tanh:3"])])
    def tanh(ctx, x, *, accuracy=None):
        return ctx.op.Tanh(x)

    @hookimpl
    def jax2onnx_rules():
        rules = Rules("myops")
        family.register(rules)
        return rules
    ```
"""

from typing import TYPE_CHECKING

from jax2onnx.registration.cases import Case, CaseError, case
from jax2onnx.registration.deferred import DeferredFamily
from jax2onnx.registration.family import Family
from jax2onnx.registration.hookspecs import hookimpl
from jax2onnx.registration.manifest import stale as stale_manifest
from jax2onnx.registration.prepare import PrepareConfig
from jax2onnx.registration.rules import Interception, Lowering, Prepared, Rules
from jax2onnx.values.dims import is_symbolic
from jax2onnx.values.dtypes import onnx_dtype
from jax2onnx.values.errors import (
    Jax2OnnxError,
    LoweringError,
    NonDifferentiableError,
    PluginConflictError,
    PluginLoadError,
    UnsupportedPrimitiveError,
    UsageError,
)
from jax2onnx.values.keys import from_parts as complex_array
from jax2onnx.values.keys import is_extended as is_key_dtype
from jax2onnx.values.keys import physical as stored_type

if TYPE_CHECKING:
    from jax2onnx.checking.validation import run_session
    from jax2onnx.checking.validation import stored as stored_array
    from jax2onnx.conversion.caching import at_conversion
    from jax2onnx.conversion.context import LoweringContext, SubgraphBuilder
    from jax2onnx.conversion.specs import new_dimension
    from jax2onnx.registration.interceptions import module_paths
    from jax2onnx.registration.macro import batch_at_front, call_arguments
    from jax2onnx.values.kernels import has_kernel, kernel_dtype, kernel_dtypes, native_kernel
    from jax2onnx.values.provenance import user_line

_LAZY = {
    # onnx_ir and jax.interpreters load with the converter, not with a plugin's import
    "LoweringContext": "jax2onnx.conversion.context",
    "at_conversion": "jax2onnx.conversion.caching",
    "SubgraphBuilder": "jax2onnx.conversion.context",
    "user_line": "jax2onnx.values.provenance",
    "call_arguments": "jax2onnx.registration.macro",
    "batch_at_front": "jax2onnx.registration.macro",
    "has_kernel": "jax2onnx.values.kernels",
    "kernel_dtype": "jax2onnx.values.kernels",
    "kernel_dtypes": "jax2onnx.values.kernels",
    "native_kernel": "jax2onnx.values.kernels",
    "run_session": "jax2onnx.checking.validation",
    "new_dimension": "jax2onnx.conversion.specs",
    "module_paths": "jax2onnx.registration.interceptions",
    "stored_array": "jax2onnx.checking.validation",
}

_RENAMED = {"stored_array": "stored"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jax2onnx.plugin' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), _RENAMED.get(name, name))


__all__ = [
    "Case",
    "CaseError",
    "DeferredFamily",
    "Family",
    "Interception",
    "Jax2OnnxError",
    "Lowering",
    "LoweringContext",
    "LoweringError",
    "NonDifferentiableError",
    "PluginConflictError",
    "PluginLoadError",
    "PrepareConfig",
    "Prepared",
    "Rules",
    "SubgraphBuilder",
    "UnsupportedPrimitiveError",
    "UsageError",
    "at_conversion",
    "batch_at_front",
    "call_arguments",
    "case",
    "complex_array",
    "has_kernel",
    "hookimpl",
    "is_key_dtype",
    "is_symbolic",
    "kernel_dtype",
    "kernel_dtypes",
    "module_paths",
    "native_kernel",
    "new_dimension",
    "onnx_dtype",
    "run_session",
    "stale_manifest",
    "stored_array",
    "stored_type",
    "user_line",
]
