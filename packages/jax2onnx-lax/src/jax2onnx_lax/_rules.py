"""The ``Rules`` object of jax2onnx-lax; family modules register on it."""

from jax2onnx.plugin import Rules

rules = Rules("lax", libraries=("jax",))
