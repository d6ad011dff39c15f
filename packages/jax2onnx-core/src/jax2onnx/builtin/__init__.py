"""The core's own plugin, registered like any other: ``calls`` lowers call-like and
no-op primitives (nested jit, custom_jvp/vjp, checkpoint, shard_map on one device,
debug callbacks, ``onnx_function``); ``fusion_cases`` holds the fusion passes' cases.

May use: values, registration, conversion.
"""
