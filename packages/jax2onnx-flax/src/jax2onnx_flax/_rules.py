"""The one ``Rules`` object of the flax plugin; family modules add to it."""

from jax2onnx.plugin import Rules

rules = Rules("flax")
