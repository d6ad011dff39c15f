"""Registration: how plugins declare rules and how they are found again.

``hookspecs`` is the contract between jax2onnx and its plugins; ``rules``,
``records`` and ``family`` hold what a plugin declares (lowerings,
interceptions, macro primitives, cases), ``deferred`` and ``manifest`` import
a family module only when a conversion needs it, ``interceptions`` and
``macro`` replace library functions while tracing, ``cases`` declares test
cases next to rules, ``prepare`` is the prepare hook's data, ``registry`` is
the merged view a conversion looks rules up in (with ``implementations`` as
the fallback of JAX's own implementation).

May use: values.
"""
