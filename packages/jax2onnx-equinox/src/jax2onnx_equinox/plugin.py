"""jax2onnx-equinox: Equinox modules.

This release registers the plugin and its (still empty) rule set; Equinox
module handlers land later. An ``eqx.Module`` is a pytree of arrays and a
callable, so ``to_onnx(module, ...)`` already converts through the lax
lowerings. The plugin declares that it lowers Equinox's own primitives, so a
missing one is reported as this plugin's gap.
"""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl


@hookimpl
def jax2onnx_rules() -> Rules:
    return Rules("equinox", libraries=("equinox",))
