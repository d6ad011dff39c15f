"""The scientific JAX stack as ONNX: lineax solves, optimistix root finding and
minimisation, diffrax ODE and SDE solves (``jax2onnx_equinox.solvers``), each a
function of its initial values, in float32 and float64 against JAX.

None of these libraries has a plugin: lineax's ``linear_solve`` primitive
converts through its JAX implementation, the Equinox primitives inside them
through the equinox plugin.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from jax2onnx import convert
from jax2onnx.plugin import Rules, case

for _library in ("diffrax", "lineax", "optimistix"):
    pytest.importorskip(_library, reason="a test dependency of jax2onnx-equinox ([test] extra)")

from jax2onnx_equinox import solvers  # noqa: E402

rules = Rules("scientific")
jax2onnx_rules = [rules]

_LOOSE = {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-10)}  # a solver's own rounding
_TOLERANCES = {
    "lineax_cg": _LOOSE,
    "optimistix_newton": _LOOSE,
    "optimistix_bfgs": _LOOSE,
    "diffrax_tsit5_pid": _LOOSE,
    "diffrax_dopri5_pid": _LOOSE,
    "diffrax_kvaerno5_stiff": {"float32": (2e-3, 1e-6), "float64": (1e-7, 1e-12)},
    "diffrax_euler_sde": _LOOSE,
}
_RANGES = {"diffrax_kvaerno5_stiff": (0.9, 1.1)}  # y0 = (scale, 0, 0)

for _name, (_fn, _shape) in solvers.SOLVES.items():
    _library, _, _example = _name.partition("_")
    rules.add_cases(
        _library,
        [
            case(
                _example,
                _fn,
                [_shape],
                tolerances=_TOLERANCES.get(_name),
                input_range=_RANGES.get(_name),
            )
        ],
    )


def test_case(jax2onnx_case, check_case):
    check_case(jax2onnx_case)


_LOOPS = ["lineax_cg", "optimistix_newton", "optimistix_bfgs", "diffrax_dopri5_pid"]
_LOOPS += ["diffrax_kvaerno5_stiff", "diffrax_euler_sde"]


@pytest.mark.parametrize("name", _LOOPS)
def test_each_solve_is_one_loop(name):
    """The solver's iteration is one Loop of the main graph (its steps inside it)."""
    fn, shape = solvers.SOLVES[name]
    graph = convert(fn, [shape]).model.graph
    assert [node.op_type for node in graph].count("Loop") == 1


def test_library_primitives_are_reported_as_inlined():
    fn, shape = solvers.SOLVES["lineax_lu"]
    assert convert(fn, [shape]).report.inlined == {"linear_solve"}
    assert convert(jnp.sin, [(4,)]).report.inlined == frozenset()


def test_a_library_imported_while_tracing_gets_its_interceptions_on_the_first_conversion(
    tmp_path,
):
    """The solvers import optimistix (and so Equinox) inside the function: the first
    conversion in a fresh process must still see Equinox's error checks intercepted."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import numpy as np\n"
        "import jax2onnx\n"
        "from jax2onnx_equinox import solvers\n"
        "assert 'equinox' not in sys.modules\n"
        "fn, shape = solvers.SOLVES['optimistix_newton']\n"
        "x = np.linspace(0.5, 1.5, shape[0]).astype(np.float32)\n"
        "path = sys.argv[1]\n"
        "jax2onnx.to_onnx(fn, [x.shape], return_mode='file', output_path=path)\n"
        "ok, why = jax2onnx.allclose(fn, path, [x], rtol=1e-4, atol=1e-5)\n"
        "assert ok, why\n"
    )
    model = str(tmp_path / "newton.onnx")
    result = subprocess.run([sys.executable, "-c", code, model], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
