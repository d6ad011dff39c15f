"""The installed version of jax2onnx-core (``0.0.0`` when run from a source tree)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jax2onnx-core")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
