"""conv_general_dilated as Conv / ConvTranspose."""

from __future__ import annotations

from jax2onnx_lax._rules import rules  # noqa: F401
