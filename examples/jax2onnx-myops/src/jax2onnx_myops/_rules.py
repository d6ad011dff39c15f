"""The one ``Rules`` object of jax2onnx-myops; ``ops`` and ``lowerings`` register on it."""

from jax2onnx.plugin import Rules

rules = Rules("myops")
