"""``@onnx_function``: calls that become ONNX functions in the exported model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def onnx_function(
    target: Callable[..., Any] | type | None = None,
    *,
    unique: bool = False,
    namespace: str | None = None,
    name: str | None = None,
    type: str | None = None,  # noqa: A002 - the public jax2onnx keyword
) -> Any:
    """Mark a function or module class so each call exports as an ONNX function.

    Not available in this release: exporting ONNX functions lands with the
    NNX support. Applying the decorator raises so that no model silently
    exports without the structure it asks for.
    """

    def decorate(obj: Any) -> Any:
        raise NotImplementedError(
            f"@onnx_function (on {getattr(obj, '__qualname__', obj)!r}) is not supported by "
            "this jax2onnx release yet; remove the decorator to export the calls inlined"
        )

    if target is not None:
        return decorate(target)
    return decorate
