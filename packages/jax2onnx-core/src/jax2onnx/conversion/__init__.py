"""Conversion: the pipeline from a JAX function to an optimised ONNX model.

The data's way: ``specs`` (input specs) -> the prepare hook -> ``tracing``
(the jaxpr, interceptions active; ``unsupported`` reports primitives no rule
lowers) -> ``lowering`` (equations to nodes through ``context``, the
lowering context rules see; ``folding`` computes small constants, ``opsets``
writes newer forms for older opsets, ``functions`` makes ONNX functions) ->
``layout`` (channels-first adaptors) -> the passes -> ``serialize``.
``converter`` runs the steps in order; ``caching`` keys a conversion's work in
JAX's caches.

May use: values, registration, passes.
"""
