"""Step 2: let a plugin turn a stateful object into a pure function to trace.

``to_onnx`` asks the ``jax2onnx_prepare`` hook (first result wins) about the
object the user passed: an NNX module, a bound method of one, a function
closing over modules ... A plugin that recognises it returns a
:class:`~jax2onnx.plugin.Prepared`; otherwise the object is traced as it is.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    """The conversion settings a ``jax2onnx_prepare`` hook may consult.

    Attributes:
        input_params: the ``input_params`` of the call (names -> example
            values); these keyword arguments stay runtime graph inputs.
        opset: the target ONNX opset.
        enable_double_precision: whether the conversion keeps 64-bit types.
        normalization_mode: ``to_onnx``'s export policy for normalisation
            layers (``"auto"``, ``"prefer_native"``, ``"force_decomposed"``).
    """

    input_params: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    opset: int = 23
    enable_double_precision: bool = False
    normalization_mode: str = "auto"

    def __post_init__(self) -> None:
        params = types.MappingProxyType(dict(self.input_params or {}))
        object.__setattr__(self, "input_params", params)


def prepare(fn: Any, plugin_set: Any, config: PrepareConfig) -> tuple[Callable[..., Any], Any]:
    """``(what to trace, the Prepared result or None)`` for the object the user passed."""
    prepared = plugin_set.prepare(fn, config)
    target = prepared.fn if prepared is not None else fn
    if not callable(target):
        raise TypeError(
            f"fn must be a callable (a function, or a module a plugin prepares), got "
            f"{type(fn).__name__}"
        )
    return target, prepared
