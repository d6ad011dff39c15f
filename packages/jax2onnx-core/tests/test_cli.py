"""The ``jax2onnx`` command line: ``plugins`` and ``convert``."""

from __future__ import annotations

import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import jax2onnx
from jax2onnx import cli

MODEL_SOURCE = """
import jax
import jax.numpy as jnp
import numpy as np

W = np.linspace(-1.0, 1.0, 30 * 4, dtype=np.float32).reshape(30, 4)


def mlp(x, *, scale=1.0):
    return jax.nn.softmax(jnp.tanh(x @ W) * scale, axis=-1)


def make_mlp():
    return mlp


def add(a, b):
    return a + b


def make_number():
    return 3


class Holder:
    fn = staticmethod(mlp)
"""


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "cli_models.py"
    path.write_text(textwrap.dedent(MODEL_SOURCE))
    return path


def _convert(capsys, *argv):
    code = cli.main(["convert", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _reference_mlp(x, scale=1.0):
    w = np.linspace(-1.0, 1.0, 30 * 4, dtype=np.float32).reshape(30, 4)
    z = np.tanh(x @ w) * scale
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_plugins_lists_every_plugin_with_counts(capsys):
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    for plugin in jax2onnx.plugins().plugins:
        row = rows[plugin.name]
        assert row[1] == plugin.distribution
        assert row[2] == plugin.version
        rules = plugin.rules
        counts = [len(rules.lowerings), len(rules.macros), len(rules.cases)] if rules else [0, 0, 0]
        assert row[3:6] == [str(c) for c in counts]
    for name in ("core", "lax", "nn", "flax", "equinox"):
        assert name in rows
    assert "No plugin failed to load." in out


def test_plugins_lists_failures(capsys, monkeypatch):
    from jax2onnx.frontend.loading import PluginFailure, PluginSet

    real = jax2onnx.plugins()
    failure = PluginFailure("broken", "jax2onnx-broken", "9.9", "ImportError: nope", "trace")
    fake = PluginSet(real._manager, real.plugins, [failure])
    monkeypatch.setattr(jax2onnx, "plugins", lambda: fake)
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "1 plugin(s) failed to load" in out
    line = next(line for line in out.splitlines() if line.startswith("broken"))
    assert line.split()[:3] == ["broken", "jax2onnx-broken", "9.9"]
    assert line.endswith("ImportError: nope")


def test_convert_a_function_from_a_file(capsys, model_file, tmp_path):
    out_path = tmp_path / "mlp.onnx"
    code, out, err = _convert(capsys, f"{model_file}:mlp", "--input", "B,30", "-o", out_path)
    assert code == 0, err
    model = onnx.load(out_path)
    onnx.checker.check_model(model, full_check=True)
    assert [
        d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim
    ] == ["B", 30]
    assert "in_0: float32[B, 30]" in out
    assert "out_0: float32[B, 4]" in out
    assert f"nodes: {len(model.graph.node)}" in out
    assert "MatMul: 1" in out and "Tanh: 1" in out
    assert f"({out_path.stat().st_size:,} bytes)" in out
    x = np.random.default_rng(0).standard_normal((5, 30)).astype(np.float32)
    (got,) = ort.InferenceSession(str(out_path)).run(None, {"in_0": x})
    np.testing.assert_allclose(got, _reference_mlp(x), rtol=1e-5, atol=1e-6)


def test_convert_a_factory_and_input_params(capsys, model_file, tmp_path):
    out_path = tmp_path / "factory.onnx"
    code, out, err = _convert(
        capsys,
        f"{model_file}:make_mlp",
        "--input",
        "B,30",
        "--input-param",
        "scale=2.5",
        "-o",
        out_path,
    )
    assert code == 0, err
    assert "scale: float32[]" in out
    x = np.ones((2, 30), np.float32)
    session = ort.InferenceSession(str(out_path))
    (got,) = session.run(None, {"in_0": x, "scale": np.asarray(-1.5, np.float32)})
    np.testing.assert_allclose(got, _reference_mlp(x, -1.5), rtol=1e-5, atol=1e-6)


def test_convert_a_dotted_module_with_dtypes_and_nested_attribute(
    capsys, model_file, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(model_file.parent))
    out_path = tmp_path / "add.onnx"
    code, out, err = _convert(
        capsys,
        "cli_models:add",
        "-i",
        "N",
        "-i",
        "N",
        "--dtype",
        "int32",
        "--opset",
        "21",
        "-o",
        out_path,
    )
    assert code == 0, err
    assert "in_0: int32[N]" in out and "in_1: int32[N]" in out and "ai.onnx 21" in out
    model = onnx.load(out_path)
    assert model.opset_import[0].version == 21
    out_path = tmp_path / "holder.onnx"
    code, out, err = _convert(capsys, "cli_models:Holder.fn", "-i", "3,30", "-o", out_path)
    assert code == 0, err
    assert "in_0: float32[3, 30]" in out


def test_convert_bfloat16_inputs_with_and_without_native_half_precision(
    capsys, model_file, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(model_file.parent))
    ops = {}
    for flags in ((), ("--native-half-precision",)):
        out_path = tmp_path / f"add{len(flags)}.onnx"
        args = ("cli_models:add", "-i", "N", "-i", "N", "--dtype", "bfloat16", *flags)
        code, out, err = _convert(capsys, *args, "-o", out_path)
        assert code == 0, err
        assert "in_0: bfloat16[N]" in out
        ops[flags] = [n.op_type for n in onnx.load(out_path).graph.node]
    assert ops[()] == ["Cast", "Cast", "Add", "Cast"]  # float32 inside: ORT CPU has no bf16 Add
    assert ops[("--native-half-precision",)] == ["Add"]


@pytest.mark.parametrize(
    ("dtype", "flags", "stored"),
    [
        ("complex64", (), "float32[N, 2]"),  # 32-bit parts: no --double needed
        ("complex64", ("--double",), "float32[N, 2]"),
        ("complex128", ("--double",), "float64[N, 2]"),
        ("float64", ("--double",), "float64[N]"),
    ],
)
def test_convert_complex_and_double_inputs(capsys, model_file, tmp_path, dtype, flags, stored):
    out_path = tmp_path / "add.onnx"
    args = (f"{model_file}:add", "-i", "N", "-i", "N", "--dtype", dtype, *flags)
    code, out, err = _convert(capsys, *args, "-o", out_path)
    assert code == 0, err
    assert f"in_0: {stored}" in out and f"out_0: {stored}" in out


def test_dtype_help_says_which_dtypes_need_double(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["convert", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "float64 and complex128 need --double" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{file}:mlp", "--input", "B,3.5"], "not a valid symbolic dimension"),
        (["{file}:mlp", "--input", "B,,30"], "axis 1 is empty"),
        (["{file}:mlp", "--input", "B,-30"], "negative"),
        (["{file}:mlp"], "--input"),
        (["{file}:nope", "--input", "B,30"], "has no attribute 'nope'"),
        (["{file}", "--input", "B,30"], "MODULE:ATTR"),
        (["j2o_no_such_module:fn", "--input", "B,30"], "cannot import module"),
        (["{dir}/missing.py:fn", "--input", "B,30"], "no such file"),
        (["{file}:mlp", "--input", "B,30", "--opset", "99"], "opset 99"),
        (["{file}:mlp", "--input", "B,30", "--dtype", "float33"], "float33"),
        (["{file}:mlp", "--input", "B,30", "--dtype", "float64"], "--double"),
        (["{file}:add", "-i", "2", "-i", "2", "--dtype", "complex128"], "--double"),
        (["{file}:add", "-i", "2", "-i", "2", "--dtype", "f4", "--dtype", "c16"], "--double"),
        (
            ["{file}:add", "-i", "2", "-i", "2", "-i", "2", "--dtype", "f4", "--dtype", "f4"],
            "2 --dtype for 3 --input",
        ),
        (["{file}:mlp", "--input", "B,30", "--input-param", "scale"], "NAME=VALUE"),
        (["{file}:mlp", "--input", "B,30", "--input-param", "scale=big"], "not a bool"),
        (["{file}:make_number", "--input", "B,30"], "factory returned a int"),
        (["{file}:W", "--input", "B,30"], "not a callable"),
    ],
)
def test_bad_requests_exit_2_with_one_line(capsys, model_file, tmp_path, args, message):
    argv = [a.format(file=model_file, dir=tmp_path) for a in args]
    code, out, err = _convert(capsys, *argv, "-o", tmp_path / "never.onnx")
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert not (tmp_path / "never.onnx").exists()


def test_usage_errors_from_argparse_return_2(capsys):
    assert cli.main(["convert"]) == 2
    assert cli.main([]) == 2
    assert cli.main(["no-such-command"]) == 2
    assert cli.main(["--help"]) == 0
    capsys.readouterr()


def test_conversion_failure_exits_1_with_the_full_message(capsys, tmp_path):
    path = tmp_path / "uses_cumsum.py"
    path.write_text(
        "from jax.extend.core import Primitive\n"
        "p = Primitive('cli_test_unlowered')\n"
        "p.def_abstract_eval(lambda x: x)\n"
        "def fn(x):\n"
        "    return p.bind(x)\n"
    )
    code, out, err = _convert(capsys, f"{path}:fn", "-i", "3", "-o", tmp_path / "x.onnx")
    assert code == 1
    assert "'cli_test_unlowered'" in err and "uses_cumsum.py:5" in err
    assert "Loaded plugins:" in err


def test_traceback_flag_reraises(model_file, tmp_path):
    with pytest.raises(cli.UsageError):
        cli.main(
            [
                "--traceback",
                "convert",
                f"{model_file}:nope",
                "-i",
                "3",
                "-o",
                str(tmp_path / "x.onnx"),
            ]
        )


def test_factory_flags_override_the_rule(capsys, model_file, tmp_path):
    # --no-factory converts make_mlp itself, which cannot take an input: tracing fails (2)
    code, _, err = _convert(
        capsys, f"{model_file}:make_mlp", "--no-factory", "-i", "B,30", "-o", tmp_path / "a.onnx"
    )
    assert code == 2 and "make_mlp" in err
    # --factory on a function with a default-only signature calls it
    code, _, err = _convert(
        capsys, f"{model_file}:make_mlp", "--factory", "-i", "B,30", "-o", tmp_path / "b.onnx"
    )
    assert code == 0, err


@pytest.mark.parametrize(
    ("text", "shape"),
    [("B,30", ("B", 30)), ("(2, 3)", (2, 3)), ("", ()), ("()", ()), (" 2*B , 4 ", ("2*B", 4))],
)
def test_parse_shape(text, shape):
    assert cli.parse_shape(text) == shape


def test_parse_param():
    assert cli.parse_param("flag=true") == ("flag", True)
    assert cli.parse_param("n=3") == ("n", 3)
    assert cli.parse_param("scale=0.5") == ("scale", 0.5)
    with pytest.raises(cli.UsageError):
        cli.parse_param("1x=3")
