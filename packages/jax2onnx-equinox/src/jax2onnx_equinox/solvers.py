"""Example solves of the scientific JAX stack, as functions of their initial values.

Each is what a scientist exports: the parameters fixed in code, the initial
value (or right-hand side) an input. None of lineax, optimistix or diffrax has a
jax2onnx plugin: lineax's own ``linear_solve`` primitive converts through its JAX
implementation, Equinox's primitives inside them through this plugin.

- :func:`linear_solve`: lineax LU, QR, Cholesky or CG on a fixed 4x4 system;
- :func:`newton`, :func:`bfgs`: optimistix root finding and minimisation;
- :func:`adaptive`: diffrax Tsit5 or Dopri5 with a PID controller;
- :func:`stiff`: Robertson's stiff kinetics with diffrax's implicit Kvaerno5;
- :func:`sde`: an Euler-Maruyama SDE on a ``VirtualBrownianTree`` with a fixed key.

The tests (``tests/test_scientific.py``) and ``benchmarks/scientific.py`` use
them; lineax, optimistix and diffrax are imported when a solve is called (they
are test dependencies of this package).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

_A = np.array(
    [[4.0, 1.0, 0.5, 0.0], [1.0, 3.0, 0.2, 0.1], [0.5, 0.2, 5.0, 1.0], [0.0, 0.1, 1.0, 2.0]]
)  # symmetric positive definite, condition number about 4


def _operator(spd: bool):
    import jax.numpy as jnp
    import lineax

    a = jnp.asarray(_A, jnp.result_type(float))  # float32, or float64 under x64
    tags = lineax.positive_semidefinite_tag if spd else ()
    return lineax.MatrixLinearOperator(a, tags)


def linear_solve(solver: str, spd: bool = False) -> Callable[[Any], Any]:
    """``b -> A^-1 b`` with lineax's ``solver`` (``"LU"``, ``"QR"``, ``"Cholesky"``, ``"CG"``)
    for a fixed symmetric positive definite 4x4 ``A``."""

    def solve(b):
        import lineax

        options = {"rtol": 1e-7, "atol": 1e-7, "max_steps": 64} if solver == "CG" else {}
        return lineax.linear_solve(_operator(spd), b, getattr(lineax, solver)(**options)).value

    return solve


def newton(y0):
    """The root of tanh(y) = 0.5 - 0.1 y, per component (optimistix Newton)."""
    import jax.numpy as jnp
    import optimistix

    fn = lambda y, args: jnp.tanh(y) - 0.5 + 0.1 * y  # noqa: E731
    return optimistix.root_find(fn, optimistix.Newton(rtol=1e-6, atol=1e-6), y0, max_steps=32).value


def bfgs(y0):
    """The minimum of a shifted quadratic with a quartic term (optimistix BFGS)."""
    import jax.numpy as jnp
    import optimistix

    fn = lambda y, args: jnp.sum((y - 1.0) ** 2 + 0.1 * (y - 1.0) ** 4)  # noqa: E731
    solver = optimistix.BFGS(rtol=1e-6, atol=1e-6)
    return optimistix.minimise(fn, solver, y0, max_steps=64).value


def _oscillator(t, y, args):
    import jax.numpy as jnp

    return jnp.stack([y[1], -y[0] - 0.1 * y[1]])


def adaptive(solver: str) -> Callable[[Any], Any]:
    """A damped oscillator from ``y0`` over [0, 5] with diffrax's explicit ``solver``
    (``"Tsit5"``, ``"Dopri5"``) and a PID step-size controller; saved at 6 times."""

    def solve(y0):
        import diffrax
        import jax.numpy as jnp

        return diffrax.diffeqsolve(
            diffrax.ODETerm(_oscillator),
            getattr(diffrax, solver)(),
            0.0,
            5.0,
            0.1,
            y0,
            stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-6),
            saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 5.0, 6)),
            max_steps=256,
        ).ys

    return solve


def _robertson(t, y, args):
    """Robertson's chemical kinetics: the classic stiff system."""
    import jax.numpy as jnp

    y1, y2, y3 = y[0], y[1], y[2]
    return jnp.stack(
        [
            -0.04 * y1 + 1e4 * y2 * y3,
            0.04 * y1 - 3e7 * y2**2 - 1e4 * y2 * y3,
            3e7 * y2**2,
        ]
    )


def stiff(scale):
    """Robertson from y0 = (scale, 0, 0) with Kvaerno5 (implicit: lineax inside)."""
    import diffrax
    import jax.numpy as jnp

    y0 = jnp.concatenate([scale, jnp.zeros(2, scale.dtype)])
    return diffrax.diffeqsolve(
        diffrax.ODETerm(_robertson),
        diffrax.Kvaerno5(),
        0.0,
        10.0,
        1e-3,
        y0,
        stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-7),
        saveat=diffrax.SaveAt(ts=jnp.array([1.0, 10.0])),
        max_steps=256,
    ).ys


def sde(y0):
    """dy = -y dt + 0.1 dW on a Brownian path fixed by its key (Euler, fixed steps)."""
    import diffrax
    import jax
    import jax.numpy as jnp

    brownian = diffrax.VirtualBrownianTree(0.0, 1.0, tol=1e-3, shape=(2,), key=jax.random.key(0))
    terms = diffrax.MultiTerm(
        diffrax.ODETerm(lambda t, y, args: -y),
        diffrax.ControlTerm(lambda t, y, args: 0.1 * jnp.eye(2, dtype=y.dtype), brownian),
    )
    saveat = diffrax.SaveAt(ts=jnp.linspace(0.0, 1.0, 5))
    return diffrax.diffeqsolve(
        terms, diffrax.Euler(), 0.0, 1.0, 0.05, y0, saveat=saveat, max_steps=64
    ).ys


SOLVES = {
    "lineax_lu": (linear_solve("LU"), (4,)),
    "lineax_qr": (linear_solve("QR"), (4,)),
    "lineax_cholesky": (linear_solve("Cholesky", spd=True), (4,)),
    "lineax_cg": (linear_solve("CG", spd=True), (4,)),
    "optimistix_newton": (newton, (3,)),
    "optimistix_bfgs": (bfgs, (3,)),
    "diffrax_tsit5_pid": (adaptive("Tsit5"), (2,)),
    "diffrax_dopri5_pid": (adaptive("Dopri5"), (2,)),
    "diffrax_kvaerno5_stiff": (stiff, (1,)),
    "diffrax_euler_sde": (sde, (2,)),
}
"""Every example: name -> (function, input shape)."""
