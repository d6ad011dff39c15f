"""``onnx_ir`` (and its pass library) for the core's modules, imported without sympy.

onnx_ir 1.x imports sympy at import time (about half a second, more than the
rest of a small conversion) for arithmetic on symbolic dimensions, which a
conversion rarely needs: the core computes symbolic sizes as ONNX values
itself. So the first import of onnx_ir here puts stand-ins for ``sympy`` and
``onnx_ir._symbolic_shapes`` into ``sys.modules`` for the duration of that
import only. onnx_ir keeps references to the stand-ins; the first attribute
read from one imports the real module and answers from it, so onnx_ir works
exactly as before, paying for sympy when it first uses it. Nothing changes
when onnx_ir or sympy is already imported, and the stand-ins are gone from
``sys.modules`` once onnx_ir is imported, so anyone else importing sympy gets
the real module.
"""

from __future__ import annotations

import importlib
import sys
import types

_DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")


class _Deferred(types.ModuleType):
    """Stands in for a module until an attribute is read, then forwards to the real one."""

    def __getattr__(self, attribute: str):
        # only reached for names this stand-in does not hold itself
        real = importlib.import_module(self.__name__)
        return getattr(real, attribute)


def _import_onnx_ir() -> types.ModuleType:
    if "onnx_ir" in sys.modules or any(name in sys.modules for name in _DEFERRED):
        return importlib.import_module("onnx_ir")
    stand_ins = {name: _Deferred(name) for name in _DEFERRED}
    for name, module in stand_ins.items():
        module.__spec__ = None  # the import system sees a module that finished loading
        sys.modules[name] = module
    try:
        return importlib.import_module("onnx_ir")
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


ir = _import_onnx_ir()
common = importlib.import_module("onnx_ir.passes.common")

__all__ = ["common", "ir"]
