"""``verify`` and the source metadata on nodes: faults injected through ``extra_rules``
(a lowering off by 1e-3, a float16 overflow, a tiny error an ill-conditioned solve
amplifies, faults inside ``scan`` and ``cond`` bodies) must be found and named."""

from __future__ import annotations

import inspect
import os

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from jax import lax

import jax2onnx
from jax2onnx import allclose, to_onnx, verify
from jax2onnx.cli import main as cli_main
from jax2onnx.plugin import Rules

_KEYS = jax.random.split(jax.random.key(0), 3)
_W = [jax.random.normal(k, (8, 8)) * 0.5 for k in _KEYS]


def mlp(x):
    for w in _W:
        x = x @ w
        x = jnp.tanh(x)
    return x


def _line(fn, text: str) -> int:
    """The line of this file, inside ``fn``, holding ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _tanh_off_by(delta: float) -> Rules:
    rules = Rules("faulty_tanh")

    @rules.lowering("tanh", override=True)
    def tanh(ctx, x, **_):
        return ctx.op.Add(ctx.op.Tanh(x), np.asarray(delta, np.float32))

    return rules


def _x(shape=(4, 8), dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def test_a_correct_conversion_verifies():
    report = verify(mlp, [_x()])
    assert report.ok, report.summary()
    assert report.first is None
    assert [e.primitive for e in report.entries] == ["dot_general", "tanh"] * 3
    assert "no equation departs" in report.summary()


def test_shape_tuples_draw_float64_data_with_double_precision():
    report = verify(lambda x: jnp.sin(x) * 2, [("B", 3)], enable_double_precision=True)
    assert report.ok, report.summary()


def test_a_wrong_lowering_is_named_with_its_source_line():
    report = verify(mlp, [_x()], extra_rules=_tanh_off_by(1e-3))
    assert not report.ok
    first = report.first
    assert first is not None and first.primitive == "tanh" and first.index == "1"
    assert first.source.startswith(f"{__file__}:{_line(mlp, 'jnp.tanh')}:")
    assert first.error.max_abs == pytest.approx(1e-3, rel=1e-2)
    assert first.inputs[0] is not None and first.inputs[0].within  # its input still agrees
    assert first.local is not None and not first.local.within  # recomputed: still off
    assert "starts here" in first.verdict()
    assert any(node.startswith("Tanh ") for node in first.nodes)
    summary = report.summary()
    assert "first departure: equation 1 `tanh`" in summary
    assert os.path.basename(__file__) in summary
    assert not report.outputs["out_0"].within


def test_the_saved_file_carries_source_metadata(tmp_path):
    path = to_onnx(mlp, [("B", 8)], return_mode="file", output_path=tmp_path / "m.onnx")
    model = onnx.load(path)
    tanh_line = f"{__file__}:{_line(mlp, 'jnp.tanh')}:"
    for node in model.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        assert props["jax2onnx.source"].startswith(__file__), node
        assert props["jax2onnx.primitive"] in ("dot_general", "tanh")
        if node.op_type == "Tanh":
            assert props["jax2onnx.source"].startswith(tanh_line)
            assert props["jax2onnx.primitive"] == "tanh"


def test_source_metadata_off_writes_none(tmp_path):
    plain = to_onnx(mlp, [("B", 8)], source_metadata=False)
    assert all(not node.metadata_props for node in plain.graph.node)
    with pytest.raises(TypeError, match="source_metadata must be a bool"):
        to_onnx(mlp, [("B", 8)], source_metadata="yes")


def test_named_scopes_become_module_paths_and_name_prefixes():
    def f(x):
        with jax.named_scope("encoder"):
            with jax.named_scope("block0"):
                y = jnp.sin(x)
        return jnp.cos(y)

    model = to_onnx(f, [(3,)])
    sin, cos = model.graph.node
    assert {p.key: p.value for p in sin.metadata_props}["jax2onnx.module"] == "encoder/block0"
    assert sin.name.startswith("encoder/block0/")
    assert "jax2onnx.module" not in {p.key for p in cos.metadata_props}
    assert "/" not in cos.name


def test_a_float16_overflow_is_found():
    rules = Rules("half_precision_exp")

    @rules.lowering("exp", override=True)
    def exp(ctx, x, **_):  # stores its result in float16: e^x overflows beyond x = 11.1
        half = ctx.op.Cast(ctx.op.Exp(x), to=onnx.TensorProto.FLOAT16)
        return ctx.op.Cast(half, to=onnx.TensorProto.FLOAT)

    def softplus(x):
        return jnp.log(jnp.exp(x) + 1.0)

    x = np.linspace(-4, 14, 10, dtype=np.float32)
    report = verify(softplus, [x], extra_rules=rules)
    first = report.first
    assert first is not None and first.primitive == "exp"
    assert first.source.startswith(f"{__file__}:{_line(softplus, 'jnp.exp')}:")
    assert first.error.nonfinite == 2  # x = 12 and 14
    assert "non-finite where JAX's are finite" in report.summary()
    assert verify(softplus, [x]).ok  # the real lowering keeps float32


def test_an_ill_conditioned_solve_shows_the_error_its_inputs_carry():
    rules = Rules("exp_two_ulps")

    @rules.lowering("exp", override=True)
    def exp(ctx, x, **_):  # 2e-7 relative: well inside float32 tolerance
        return ctx.op.Mul(ctx.op.Exp(x), np.float32(1 + 2.4e-7))

    n = 6
    hilbert = np.array([[1 / (i + j + 1) for j in range(n)] for i in range(n)], np.float32)

    def f(log_a, b):
        return jnp.linalg.solve(jnp.exp(log_a), b)

    report = verify(f, [np.log(hilbert), np.ones(n, np.float32)], extra_rules=rules)
    exp_entry = report.entries[0]
    assert exp_entry.primitive == "exp" and exp_entry.error.within and exp_entry.error.max_abs > 0
    first = report.first
    assert first is not None and first.primitive not in ("exp",)
    assert first.input_error() > 0  # the error was already in its inputs
    assert first.carried is not None and not first.carried.within  # and it alone departs


def test_scan_and_cond_bodies_are_compared_at_their_boundary():
    def f(x):
        def body(c, xi):
            c = jnp.tanh(c + xi)
            return c, c * 2

        c, ys = lax.scan(body, x[0], x)
        return c, ys

    report = verify(f, [_x((5, 4))], extra_rules=_tanh_off_by(1e-3))
    assert report.first is not None and report.first.primitive == "scan"
    assert "boundary" in report.first.note
    assert "Loop" in report.first.note or "Scan" in report.first.note

    def g(x):
        return lax.cond(x.sum() > 0, jnp.tanh, lambda v: jnp.tanh(-v), x)

    report = verify(g, [_x((4,))], extra_rules=_tanh_off_by(1e-3))
    assert report.first is not None and report.first.primitive == "cond"
    assert "If boundary" in report.first.note


def test_jit_bodies_are_compared_equation_by_equation():
    @jax.jit
    def inner(x):
        return jnp.tanh(jnp.sin(x))

    def f(x):
        return inner(x) * 3

    report = verify(f, [_x()], extra_rules=_tanh_off_by(1e-3))
    assert report.first is not None
    assert (report.first.primitive, report.first.index) == ("tanh", "0.0.1")


def test_a_given_model_is_checked_by_name(tmp_path):
    rules = _tanh_off_by(1e-3)
    path = to_onnx(
        mlp, [("B", 8)], return_mode="file", output_path=tmp_path / "m.onnx", extra_rules=rules
    )
    report = verify(mlp, [_x()], model=path, extra_rules=rules)
    assert report.first is not None and report.first.primitive == "tanh"
    # a model from other arguments: its values are not found, the outputs still compared
    other = verify(mlp, [_x()], model=path)
    assert not other.ok
    assert any("not in the given model" in note for note in other.notes)


def test_allclose_points_at_verify(tmp_path):
    path = to_onnx(
        mlp,
        [("B", 8)],
        return_mode="file",
        output_path=tmp_path / "m.onnx",
        extra_rules=_tanh_off_by(1e-3),
    )
    ok, message = allclose(mlp, path, [_x()])
    assert not ok and "jax2onnx.verify" in message


def test_the_command_line_verifies(tmp_path, capsys):
    module = tmp_path / "faulty_model.py"
    module.write_text(
        "import jax.numpy as jnp\n\ndef model(x):\n    return jnp.tanh(x) * 2\n", encoding="utf-8"
    )
    status = cli_main(["verify", f"{module}:model", "--input", "B,3", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "no equation departs" in out


def test_verify_is_public():
    assert jax2onnx.verify is verify
    assert "verify" in jax2onnx.__all__


def test_onnx_function_bodies_carry_the_function_name():
    @jax2onnx.onnx_function
    def scaled(x):
        return jnp.tanh(x) * 2

    def f(x):
        return scaled(x) + 1

    proto = to_onnx(f, [(3,)])
    (function,) = proto.functions
    for node in function.node:
        assert {p.key: p.value for p in node.metadata_props}["jax2onnx.module"] == "scaled"
        assert node.name.startswith("scaled/")
    report = verify(f, [_x((3,))], extra_rules=_tanh_off_by(1e-3))
    assert report.first is not None and report.first.primitive == "onnx_function"
    assert "ONNX function scaled" in report.first.note
