"""Entry point of jax2onnx-lax: each call builds a fresh ``Rules`` from the family modules."""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl

# the family modules; _manifest.py (`jax2onnx manifest PLUGIN`) says what each declares
FAMILIES = (
    "bessel",
    "binary",
    "bits",
    "bitwise",
    "complex_math",
    "complex_trig",
    "complex_layout",
    "complex_linear",
    "complex_reduce",
    "complex_scatter",
    "control_flow",
    "conv",
    "cumulative",
    "dot",
    "dynamic",
    "dynamic_cases",
    "dynamic_complex",
    "fft",
    "fft_cases",
    "folds",
    "gamma",
    "gather",
    "image",
    "incomplete",
    "indexing",
    "linalg",
    "linalg_eig",
    "linalg_eig_general",
    "linalg_lu",
    "linalg_qr",
    "masked_update",
    "numpy_api",
    "ragged",
    "random",
    "reduction",
    "rng_bits",
    "scatter",
    "shape",
    "sort",
    "special",
    "symbolic_cases",
    "types",
    "unary",
    "windows",
    "window_grads",
)


@hookimpl
def jax2onnx_rules() -> Rules:
    rules = Rules("lax", libraries=("jax",))
    from jax2onnx_lax._manifest import MANIFEST

    rules.defer(MANIFEST)  # each family module is imported when a conversion needs it
    return rules
