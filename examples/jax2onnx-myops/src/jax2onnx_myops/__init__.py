"""jax2onnx-myops: an example third-party jax2onnx plugin.

Use the operations through the ``ops`` module::

    from jax2onnx_myops import ops

    y = ops.swish_gate(x, gate, beta=1.5)
    z = ops.fused_softclip(y, limit=2.0)   # call through the module: see ops
"""

from jax2onnx_myops import ops
from jax2onnx_myops.ops import swish_gate

__all__ = ["ops", "swish_gate"]
__version__ = "0.1.0"
