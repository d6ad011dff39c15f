# Import the heavy modules once here: ``pytester`` restores ``sys.modules`` after
# each in-process run, so anything first imported by an inner run (JAX, the
# converter, its plugins) would otherwise be imported afresh by the next one.
import jax  # noqa: F401
import jax2onnx  # noqa: F401
import jax2onnx_lax.plugin  # noqa: F401
import onnxruntime  # noqa: F401

import jax2onnx_testkit.check  # noqa: F401

pytest_plugins = ["pytester"]
