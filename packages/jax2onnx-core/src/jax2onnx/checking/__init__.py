"""Checking exported models against JAX: ``validation`` (``allclose``, ONNX
Runtime, and ``allclose_onnxruntime_web`` through ``web``'s Node.js and Chromium
runners), ``verification`` (``verify``: the first equation whose ONNX value
departs from JAX's) with ``divergence``, its report.

May use: values, registration, conversion, frontend.
"""
