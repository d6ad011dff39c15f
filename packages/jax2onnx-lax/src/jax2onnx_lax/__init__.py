"""jax2onnx-lax: lowerings of the primitives JAX itself emits.

The public API for other plugins is :mod:`jax2onnx_lax.blocks`: lowering
building blocks (``nan_exact_max_pool``, ``conv_transpose_kernel``) that take
a lowering context like a rule does. Everything else is this plugin's own.
"""
