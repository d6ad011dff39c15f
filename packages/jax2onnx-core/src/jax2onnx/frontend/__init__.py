"""Frontend: what the public doors call. ``api`` implements ``to_onnx``,
``convert`` and ``traced_callable``; ``loading`` discovers the installed plugins
(entry points, through pluggy) and registers the core's own.

May use: values, registration, conversion, builtin.
"""
