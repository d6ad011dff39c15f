"""Shared helpers of the rules for complex values (``values="complex"``).

A complex array is stored as a float array with a trailing axis of 2 (real,
imaginary): ``complex64[3, 4]`` is ``float32[3, 4, 2]``. The rules write
complex arithmetic as real JAX code on that form and inline it with
``ctx.decompose(fn, *inputs, stored=True)``; the real lowerings then emit the
ONNX ops (``Split`` into parts, arithmetic, ``Concat`` back).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from jax import lax


def parts(x: Any) -> tuple[Any, Any]:
    """The real and imaginary parts of a stored complex array, each ``[..., 1]``."""
    re, im = lax.split(x, (1, 1), axis=x.ndim - 1)
    return re, im


def join(re: Any, im: Any) -> Any:
    """The stored complex array of parts ``[..., 1]`` (one ``Concat``)."""
    return lax.concatenate([re, im], re.ndim - 1)


def mul(x: Any, y: Any) -> Any:
    """The complex product of two stored complex arrays of one shape."""
    a, b = parts(x)
    c, d = parts(y)
    return join(a * c - b * d, a * d + b * c)


def stored_rule(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A lowering that inlines ``fn(*stored_inputs, **params)`` (real JAX code).

    ``fn`` takes the equation's inputs as stored (complex ones ``[..., 2]``)
    and its parameters, and returns the outputs in the same form.
    """

    @functools.wraps(fn)
    def rule(ctx: Any, *inputs: Any, **params: Any) -> Any:
        return ctx.decompose(fn, *inputs, stored=True, **params)

    return rule
