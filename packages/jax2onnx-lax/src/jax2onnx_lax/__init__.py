"""jax2onnx-lax: lowerings of the primitives JAX itself emits."""
