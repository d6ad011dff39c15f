"""The pytest plugin, run on generated test modules with ``pytester``."""

from __future__ import annotations

import json
import textwrap

import pytest

TEST_CASE = """

def test_case(jax2onnx_case, check_case):
    check_case(jax2onnx_case)
"""

DEMO = """
import jax.numpy as jnp

from jax2onnx.plugin import Rules, case

rules = Rules("demo")
rules.add_cases("demo_component", [case("tanh", jnp.tanh, [("B", 3)], expect=["Tanh"])])
jax2onnx_rules = [rules]
"""

# a test-local primitive whose JAX impl is tanh; ``WRONG_OP`` is what it lowers to
PRIMITIVE = """
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import mlir

from jax2onnx.plugin import Rules, case

demo_tanh_p = Primitive("testkit_demo_tanh")
demo_tanh_p.def_impl(jnp.tanh)
demo_tanh_p.def_abstract_eval(lambda x: x)
mlir.register_lowering(demo_tanh_p, mlir.lower_fun(jnp.tanh, multiple_results=False))

rules = Rules("demo")


@rules.lowering(demo_tanh_p)
def lower(ctx, x):
    return getattr(ctx.op, WRONG_OP)(x)


jax2onnx_rules = [rules]
"""


# plugins that don't concern these runs: the hypothesis plugin imports hypothesis
# at the end of each run (seconds per in-process run, since pytester restores
# ``sys.modules`` afterwards); pytest-benchmark warns inside xdist workers
INNER_ARGS = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:benchmark",
    "--import-mode=importlib",
)


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_demo=textwrap.dedent(source) + TEST_CASE)
    return pytester.runpytest(*INNER_ARGS, *args)


def _ids(result: pytest.RunResult) -> list[str]:
    return [line.split("::", 1)[1] for line in result.outlines if line.startswith("test_demo.py::")]


def test_ids_of_variants(pytester):
    result = _run(pytester, DEMO, "--collect-only", "-q")
    assert _ids(result) == [
        "test_case[demo/demo_component/tanh[f32-static]]",
        "test_case[demo/demo_component/tanh[f64-static]]",
        "test_case[demo/demo_component/tanh[f32-dynamic]]",
    ]


def test_cases_declared_as_a_function_are_collected(pytester):
    source = DEMO.replace(
        'rules.add_cases("demo_component", [case(',
        'rules.add_cases("demo_component", lambda: [case(',
    )
    assert "lambda: [case(" in source
    source += 'rules.add_cases("other", lambda: [case("sin", jnp.sin, [(3,)])])\n'
    result = _run(pytester, source, "-v")
    result.assert_outcomes(passed=5)
    assert [i.split()[0] for i in _ids(result)] == [
        "test_case[demo/demo_component/tanh[f32-static]]",
        "test_case[demo/demo_component/tanh[f64-static]]",
        "test_case[demo/demo_component/tanh[f32-dynamic]]",
        "test_case[demo/other/sin[f32-static]]",
        "test_case[demo/other/sin[f64-static]]",
    ]


def test_a_case_that_cannot_be_built_is_a_usage_error_naming_where(pytester):
    source = DEMO + 'rules.add_cases("broken", lambda: [case("", jnp.sin, [(3,)])])\n'
    result = _run(pytester, source)
    result.stdout.fnmatch_lines(
        [
            "*plugin 'demo': the cases of 'broken' (declared at test_demo:*) could not be built: "
            "ValueError: case name '' must be non-empty* (at *test_demo.py:*)*"
        ]
    )
    assert result.ret != 0


def test_correct_lowering_passes(pytester):
    result = _run(pytester, DEMO)
    result.assert_outcomes(passed=3)


def test_primitive_with_right_op_passes(pytester):
    source = PRIMITIVE.replace("WRONG_OP", '"Tanh"') + (
        'rules.add_cases(demo_tanh_p, [case("t", demo_tanh_p.bind, [(2, 3)])])\n'
    )
    _run(pytester, source).assert_outcomes(passed=2)


def test_wrong_lowering_fails(pytester):
    source = PRIMITIVE.replace("WRONG_OP", '"Sigmoid"') + (
        'rules.add_cases(demo_tanh_p, [case("t", demo_tanh_p.bind, [(2, 3)])])\n'
    )
    result = _run(pytester, source)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*demo/testkit_demo_tanh/t[[]f32-static[]] at sizes {}: output 0 differs from JAX*"]
    )


def test_expect_graph_failure(pytester):
    source = DEMO.replace('expect=["Tanh"]', 'expect=["Tanh -> Sigmoid"]')
    result = _run(pytester, source)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*graph expectations failed: no path 'Tanh -> Sigmoid'*"])


def test_skip_and_xfail_with_reasons(pytester):
    source = DEMO + textwrap.dedent(
        """
        rules.add_cases("other", [
            case("skipped", jnp.tanh, [(3,)], skip="not today"),
            case("xfailed", jnp.tanh, [(3,)], expect=["Relu"], xfail="no Relu here"),
        ])
        """
    )
    result = _run(pytester, source, "-rsx")
    # tanh: 3 variants; skipped and xfailed: f32-static and f64-static each
    result.assert_outcomes(passed=3, skipped=2, xfailed=2)
    result.stdout.fnmatch_lines(["SKIPPED*not today*", "XFAIL*no Relu here*"])


def test_xfail_is_strict(pytester):
    source = DEMO.replace('expect=["Tanh"]', 'expect=["Tanh"], xfail="should fail but passes"')
    result = _run(pytester, source)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*XPASS(strict)*should fail but passes*"])


def test_plugins_of_the_distribution(pytester):
    pytester.makefile(
        ".toml",
        pyproject=textwrap.dedent(
            """
            [project]
            name = "whatever"

            [project.entry-points.jax2onnx]
            lax = "jax2onnx_lax.plugin"
            """
        ),
    )
    pytester.mkdir("tests")
    pytester.path.joinpath("tests", "test_cases.py").write_text(TEST_CASE)
    result = pytester.runpytest(*INNER_ARGS, "--collect-only", "-q", "tests")
    ids = [line for line in result.outlines if line.startswith("tests/test_cases.py::")]
    assert any(i.startswith("tests/test_cases.py::test_case[lax/") for i in ids), result.outlines
    assert "tests/test_cases.py::test_case[lax/tanh/tanh[f32-static]]" in ids


def test_unknown_plugin_is_a_usage_error(pytester):
    pytester.makepyfile(test_demo='jax2onnx_plugins = ["no_such_plugin"]\n' + TEST_CASE)
    result = pytester.runpytest(*INNER_ARGS)
    result.stdout.fnmatch_lines(["*no_such_plugin*not loaded*"])
    assert result.ret != 0


def test_duplicate_case_ids_are_a_usage_error(pytester):
    source = DEMO + 'rules.add_cases("demo_component", [case("tanh", jnp.sin, [(3,)])])\n'
    result = _run(pytester, source)
    result.stdout.fnmatch_lines(["*two jax2onnx cases have the id*demo/demo_component/tanh*"])
    assert result.ret != 0


QUICK_DEMO = (
    DEMO
    + """
rules.add_cases("demo_component", [case("static_sin", jnp.sin, [(3,)])])

import pytest

@pytest.mark.full_suite
def test_broad():
    pass


def test_unit():
    pass
"""
)


def test_quick_runs_one_variant_per_case_and_leaves_out_full_suite_tests(pytester):
    full = _ids(_run(pytester, QUICK_DEMO, "--collect-only", "-q"))
    assert "test_broad" in full and len(full) == 3 + 2 + 2
    result = _run(pytester, QUICK_DEMO, "--quick", "-v")
    result.assert_outcomes(passed=3, deselected=1)
    assert sorted(line.split(" PASSED")[0] for line in _ids(result)) == [
        "test_case[demo/demo_component/static_sin[f32-static]]",
        "test_case[demo/demo_component/tanh[f32-dynamic]]",
        "test_unit",
    ]


def test_timings_file_has_every_test_and_the_phases_of_each_check(pytester):
    path = pytester.path / "timings.jsonl"
    _run(pytester, QUICK_DEMO, f"--jax2onnx-timings={path}").assert_outcomes(passed=7)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    reports = [line for line in lines if "when" in line]
    assert {line["when"] for line in reports} == {"setup", "call", "teardown"}
    assert len({line["id"] for line in reports}) == 7
    assert all(line["seconds"] >= 0 and line["worker"] == "main" for line in reports)
    checks = {line["id"]: line["phases"] for line in lines if "phases" in line}
    assert len(checks) == 5  # the check_case tests, not test_unit or test_broad
    phases = checks["test_demo.py::test_case[demo/demo_component/tanh[f32-dynamic]]"]
    for key in ("case", "convert", "convert.trace", "convert.lower", "checker", "jax"):
        assert phases[key] >= 0, key
    assert {"ort_session", "ort_run", "jax.compile"} <= set(phases)
