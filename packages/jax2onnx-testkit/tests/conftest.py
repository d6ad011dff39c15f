# Import the heavy modules once here: ``pytester`` restores ``sys.modules`` after
# each in-process run, so anything first imported by an inner run (JAX, the
# converter, its plugins) would otherwise be imported afresh by the next one.
import jax  # noqa: F401
import onnxruntime  # noqa: F401

import jax2onnx  # noqa: F401
import jax2onnx_lax.plugin  # noqa: F401
import jax2onnx_testkit.check  # noqa: F401


def pytest_configure(config):
    # ``pytest_plugins`` is refused in a conftest below the rootdir, and the
    # root runs every package's tests: load pytester (for its fixture) here
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
