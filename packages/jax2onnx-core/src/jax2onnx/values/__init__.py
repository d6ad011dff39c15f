"""Values: what the converter's data are, used by every other room.

``ir`` imports onnx_ir (without sympy); ``dtypes`` maps JAX/NumPy dtypes to
ONNX's; ``dims`` computes symbolic dimensions as ONNX values; ``keys`` says how
ONNX stores what it has no type for (PRNG keys, complex numbers); ``kernels``
is the table of dtypes ONNX Runtime has kernels for; ``provenance`` names the
metadata that ties each node to the user's equation; ``errors`` holds the
exceptions every room raises; ``version`` the distribution's version.

May use: nothing else of jax2onnx.
"""
