"""``export_mode="web"`` and ``allclose_onnxruntime_web`` under Node.js and headless Chromium.

The runners need the npm package onnxruntime-web (and Chromium for the
browser runner); ``.ci/run`` installs both and sets ``JAX2ONNX_REQUIRE_WEB``,
which turns a missing runtime into an error. Elsewhere the tests that need a
missing runtime skip and say what to install.
"""

import os

import jax.numpy as jnp
import numpy as np
import onnx
import pytest

from jax2onnx import allclose, allclose_onnxruntime_web, to_onnx
from jax2onnx.checking.web import WebRuntimeError, find_chromium, find_package

W = np.linspace(-1.0, 1.0, 5000 * 4, dtype=np.float32).reshape(5000, 4)


def _missing(find):
    try:
        find()
    except WebRuntimeError as err:
        return str(err)
    return None


_NO_PACKAGE = _missing(find_package)
_NO_CHROMIUM = _NO_PACKAGE or _missing(find_chromium)
if os.environ.get("JAX2ONNX_REQUIRE_WEB") and (_NO_PACKAGE or _NO_CHROMIUM):
    # CI installs both runtimes: there a missing one is an error, not a skip
    raise RuntimeError(f"JAX2ONNX_REQUIRE_WEB is set but: {_NO_PACKAGE or _NO_CHROMIUM}")
needs_node = pytest.mark.skipif(_NO_PACKAGE is not None, reason=f"{_NO_PACKAGE}")
needs_chromium = pytest.mark.skipif(_NO_CHROMIUM is not None, reason=f"{_NO_CHROMIUM}")


def mixed(x, idx, flags):
    """Float (with NaN, inf and -0.0 in play), int64 and bool outputs."""
    y = jnp.tanh(x @ W[: x.shape[-1]]) / jnp.where(x[:, :1] > 0, x[:, :1], -0.0)
    return y, jnp.cumsum(idx, axis=-1), jnp.logical_not(flags), x.astype(jnp.float16) * 2


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    x[0, 0] = 0.0
    idx = rng.integers(-(2**40), 2**40, (3, 4), dtype=np.int64)
    return [x, idx, rng.random((3, 2)) > 0.5]


@pytest.fixture(scope="module")
def web_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("web") / "mixed.onnx")
    to_onnx(
        mixed,
        [
            jax_spec(("B", 6), np.float32),
            jax_spec(("B", 4), np.int64),
            jax_spec(("B", 2), np.bool_),
        ],
        return_mode="file",
        output_path=path,
        export_mode="web",
        enable_double_precision=True,
    )
    return path


def jax_spec(shape, dtype):
    import jax

    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def test_web_export_is_one_self_contained_file(tmp_path):
    w = np.ones((1024, 1024), np.float32)
    path = str(tmp_path / "big.onnx")
    out = to_onnx(
        lambda x: x @ w, [("B", 1024)], return_mode="file", output_path=path, export_mode="web"
    )
    assert out == path
    assert sorted(os.listdir(tmp_path)) == ["big.onnx"]
    model = onnx.load(path)
    assert all(i.data_location != onnx.TensorProto.EXTERNAL for i in model.graph.initializer)
    ok, message = allclose(lambda x: x @ w, path, [np.ones((2, 1024), np.float32)])
    assert ok, message


def test_web_mode_returns_the_same_model_as_standard():
    fn = lambda x: jnp.sin(x) * 2  # noqa: E731
    web = to_onnx(fn, [("B", 3)], export_mode="web")
    standard = to_onnx(fn, [("B", 3)])
    assert web.SerializeToString() == standard.SerializeToString()


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"export_mode": "browser"}, ValueError, "export_mode must be one of"),
        ({"export_mode": 1}, TypeError, "export_mode must be a string"),
        (
            {"export_mode": "web", "external_data": True, "return_mode": "file"},
            ValueError,
            "self-contained",
        ),
        ({"normalization_mode": "native"}, ValueError, "normalization_mode must be one of"),
        ({"normalization_mode": None}, TypeError, "normalization_mode must be a string"),
    ],
)
def test_mode_arguments_are_checked(tmp_path, kwargs, error, pattern):
    if kwargs.get("return_mode") == "file":
        kwargs["output_path"] = str(tmp_path / "m.onnx")
    with pytest.raises(error, match=pattern):
        to_onnx(lambda x: x + 1, [(3,)], **kwargs)


def test_modes_are_case_insensitive():
    model = to_onnx(
        lambda x: x + 1, [(3,)], export_mode=" Web ", normalization_mode="Force_Decomposed"
    )
    assert [n.op_type for n in model.graph.node] == ["Add"]


@needs_node
def test_node_runner_matches_cpu_exactly_for_every_dtype(web_model):
    ok, message = allclose_onnxruntime_web(web_model, _inputs(), rtol=1e-6, atol=1e-6)
    assert ok, message
    assert "onnxruntime-web (node)" in message


@needs_node
def test_node_runner_reports_a_mismatch_it_cannot_hide(tmp_path, web_model, monkeypatch):
    """A model that differs from the one ORT CPU ran must fail: swap the file under the runner."""
    from jax2onnx.checking import web

    other = str(tmp_path / "other.onnx")
    to_onnx(
        lambda x, i, f: (*mixed(x, i, f)[:3], x.astype(jnp.float16) * 3),
        [
            jax_spec(("B", 6), np.float32),
            jax_spec(("B", 4), np.int64),
            jax_spec(("B", 2), np.bool_),
        ],
        return_mode="file",
        output_path=other,
        enable_double_precision=True,
    )
    real_run = web.run
    monkeypatch.setattr(web, "run", lambda runner, model, feed, **kw: real_run(runner, other, feed))
    ok, message = allclose_onnxruntime_web(web_model, _inputs())
    assert not ok
    assert "output 3" in message


@needs_node
def test_node_runner_names_a_missing_node():
    x = _inputs()
    ok, message = allclose_onnxruntime_web(
        _model_file(), [x[0]], node_command="/nonexistent/node", runner="node"
    )
    assert not ok
    assert "Node.js was not found" in message


def _model_file():
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "tanh.onnx")
    return to_onnx(
        lambda x: jnp.tanh(x), [("B", 6)], return_mode="file", output_path=path, export_mode="web"
    )


def test_unknown_runner_is_refused():
    ok, message = allclose_onnxruntime_web(
        _model_file(), [np.ones((2, 6), np.float32)], runner="ie"
    )
    assert not ok
    assert "runner must be one of" in message


def test_missing_package_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("JAX2ONNX_ONNXRUNTIME_WEB", str(tmp_path))
    ok, message = allclose_onnxruntime_web(_model_file(), [np.ones((2, 6), np.float32)])
    assert not ok
    assert "not the onnxruntime-web package directory" in message


@needs_chromium
def test_chromium_runner_matches_cpu(web_model):
    ok, message = allclose_onnxruntime_web(
        web_model, _inputs(), rtol=1e-6, atol=1e-6, runner="chrome"
    )
    assert ok, message
    assert "onnxruntime-web (chrome)" in message


@needs_chromium
def test_runner_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("JAX2ONNX_ONNXRUNTIME_WEB_RUNNER", "browser")
    ok, message = allclose_onnxruntime_web(_model_file(), [("B", 6)])
    assert ok, message
    assert "(chrome)" in message
