"""jax2onnx plugin distribution `jax2onnx-equinox`."""
