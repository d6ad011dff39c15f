"""The ``Rules`` object of jax2onnx-nn; family modules register on it."""

from jax2onnx.plugin import Rules

rules = Rules("nn")
