"""Faults in any step: the error names the step, no partial file, the process carries on."""

from __future__ import annotations

import errno
import os

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jax2onnx
from jax2onnx import passes
from jax2onnx.conversion import lowering, serialize, tracing
from jax2onnx.plugin import LoweringError, Rules
from jax2onnx.registration import prepare


def _model(x):
    return jnp.tanh(x) * 2.0


def _files(directory) -> set[str]:
    return set(os.listdir(directory))


@pytest.fixture
def previous(tmp_path):
    """A model already at the output path, which a failed write must leave as it is."""
    path = tmp_path / "model.onnx"
    jax2onnx.to_onnx(jnp.sin, [(3,)], return_mode="file", output_path=path)
    return path, path.read_bytes()


def _boom(*_args, **_kwargs):
    raise RuntimeError("injected fault")


def _disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _permission_denied(*_args, **_kwargs):
    raise PermissionError(errno.EACCES, "Permission denied")


@pytest.mark.parametrize(
    ("step", "target", "attribute", "fault"),
    [
        ("prepare", prepare, "prepare", _boom),
        ("trace", tracing, "trace", _boom),
        ("lower", lowering, "lower", _boom),
        ("passes", passes, "optimize", _boom),
        ("serialize", serialize, "write_streaming", _disk_full),
        ("serialize", serialize, "_exchange", _permission_denied),
    ],
)
def test_a_fault_in_a_step_names_it_and_leaves_no_partial_file(
    monkeypatch, previous, step, target, attribute, fault
):
    path, before = previous
    listing = _files(path.parent)
    with monkeypatch.context() as patch:
        patch.setattr(target, attribute, fault)
        with pytest.raises((RuntimeError, OSError)) as info:
            jax2onnx.to_onnx(_model, [("B", 3)], return_mode="file", output_path=path)
    assert f"'{step}' step" in "\n".join(getattr(info.value, "__notes__", []))
    assert _files(path.parent) == listing  # nothing new: no temporary, no .data
    assert path.read_bytes() == before  # the previous model is intact
    # the process converts the next model fine
    jax2onnx.to_onnx(_model, [("B", 3)], return_mode="file", output_path=path)
    onnx.checker.check_model(onnx.load(path), full_check=True)


def test_an_interrupted_external_data_write_leaves_the_previous_files(monkeypatch, tmp_path):
    path = tmp_path / "big.onnx"
    w = np.arange(4096, dtype=np.float32).reshape(64, 64)
    fn = lambda x: x @ w  # noqa: E731
    jax2onnx.to_onnx(fn, [(2, 64)], return_mode="file", output_path=path, external_data=True)
    model_bytes, data_bytes = path.read_bytes(), (tmp_path / "big.onnx.data").read_bytes()
    listing = _files(tmp_path)

    real_save = serialize.ir.save

    def interrupted(model, target, **kwargs):
        real_save(model, target, **kwargs)
        raise KeyboardInterrupt  # after the staged files are written, before the renames

    monkeypatch.setattr(serialize.ir, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        jax2onnx.to_onnx(
            lambda x: x @ (w * 2),
            [(2, 64)],
            return_mode="file",
            output_path=path,
            external_data=True,
        )
    assert _files(tmp_path) == listing
    assert path.read_bytes() == model_bytes
    assert (tmp_path / "big.onnx.data").read_bytes() == data_bytes


def _plugin_rules(kind: str) -> Rules:
    prim = jax.extend.core.Primitive(f"test_fault_{kind}")
    prim.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
    rules = Rules(f"faulty_{kind}")

    @rules.lowering(prim)
    def lower(ctx, x):
        if kind == "raises":
            raise ZeroDivisionError("bug in the plugin")
        return x, x  # one output too many

    return rules, prim


@pytest.mark.parametrize("kind", ["raises", "outputs"])
def test_a_faulty_lowering_is_named_and_the_others_keep_working(kind):
    rules, prim = _plugin_rules(kind)
    with pytest.raises(LoweringError, match=f"plugin 'faulty_{kind}'") as info:
        jax2onnx.to_onnx(lambda x: prim.bind(jnp.tanh(x)), [(3,)], extra_rules=rules)
    assert "'lower' step" in "\n".join(info.value.__notes__)
    model = jax2onnx.to_onnx(_model, [(3,)])
    assert [n.op_type for n in model.graph.node] == ["Tanh", "Mul"]
