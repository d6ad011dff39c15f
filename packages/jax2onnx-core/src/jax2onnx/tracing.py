"""Step 3: trace the function to a ClosedJaxpr with interceptions active, and re-trace.

The registry's interceptions (:mod:`jax2onnx.interceptions`) are visible to
this trace only; every primitive of the result must have a lowering, checked
here and again for every jaxpr a lowering traces (:func:`retrace`).

While the first trace runs, :func:`jax2onnx.specs.new_dimension` gives stand-ins of
functions whose output size depends on the data (``jnp.nonzero``,
``jnp.unique`` ...) a fresh symbolic dimension of this conversion.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax

from jax2onnx.caching import EAGER_KEY, JIT_KEY
from jax2onnx.context import user_line_of
from jax2onnx.functions import exporting
from jax2onnx.interceptions import interceptions_active
from jax2onnx.specs import new_dimensions
from jax2onnx.unsupported import check_supported, iter_equations


def trace(fn: Callable[..., Any], specs: Any, registry: Any, plugin_set: Any) -> tuple[Any, Any]:
    """``make_jaxpr`` of ``fn(*positional, **params)`` over the flat leaves of ``specs``.

    The registry's interceptions are active while ``fn`` traces; JAX's errors
    that a user can act on are said in their terms, and a primitive no plugin
    lowers is reported (with its source line) before anything is lowered.
    Returns the ClosedJaxpr and the pytree of output shapes.
    """

    def flat(*leaves):
        args, kwargs = specs.rebuild(leaves)
        return fn(*args, **kwargs)

    param_names = [k for k, _ in specs.params]
    interceptions = registry.interceptions

    def make_jaxpr(target):
        with (
            contextlib.ExitStack() as keys,
            new_dimensions(specs.all_specs) as dims,
            interceptions_active(interceptions),
            exporting(),
        ):
            for factory in registry.tracing_contexts:
                entered = factory()
                if entered is not None:
                    keys.enter_context(entered)
            dims.on_new = lambda: keys.enter_context(JIT_KEY((interceptions, dims, dims.made)))
            dims.on_new()
            keys.callback(EAGER_KEY.reset, EAGER_KEY.set(("at_conversion", interceptions)))
            return jax.make_jaxpr(target, return_shape=True)(*specs.all_specs)

    try:
        try:
            closed, out_shapes = make_jaxpr(flat)
        except jax.errors.ConcretizationTypeError:
            flags = _flag_positions(specs)
            if not flags:
                raise
            # bool flags in Python control flow (``if deterministic:``): one branch per value
            closed, out_shapes = make_jaxpr(_branch_on_flags(flat, flags))
    except jax.errors.ConcretizationTypeError as err:
        if param_names:
            raise TypeError(
                f"tracing failed because a runtime parameter ({', '.join(param_names)}) is "
                "used in Python control flow; input_params become graph inputs. A bool "
                f"parameter (at most {_MAX_FLAGS}) is traced once per value and selected with an "
                "If, which needs both values to give outputs of one shape; otherwise use "
                f"jax.lax.cond/jnp.where on it. JAX said: {err}"
            ) from err
        raise
    except Exception as err:
        undecided = _undecided(err, specs.all_specs)
        if undecided is None:
            raise
        what, remedy = undecided
        line = user_line_of(err.__traceback__)
        raise ValueError(
            f"JAX {what} while tracing{f' at {line}' if line else ''} (inputs "
            f"{[s.shape for s in specs.all_specs]}). {remedy} JAX said: {err}"
        ) from err
    check_supported(closed, registry, plugin_set)
    return closed, out_shapes


_MAX_FLAGS = 4  # 2**4 traced branches at most


_DECIDE = (
    "Use concrete sizes for the dimensions involved, express the shapes with the same "
    "symbols (e.g. 'B' and '2*B' rather than two unrelated names), or, when a size has a "
    "bound that decides it (a table of 64 rows cut to T, top_k(x, 2) on T >= 2), give the "
    "bound as a constraint: jax.ShapeDtypeStruct(jax.export.symbolic_shape('B, T', "
    "constraints=['T <= 64']), jnp.float32) in inputs."
)
_CONCRETE = (
    "That code computes with the size itself in Python or NumPy (an int() of it, a NumPy "
    "array of that length), which only a concrete size allows (jax.export refuses it too): "
    "give that axis a static size, or compute with jnp/lax on the shape instead."
)


def _undecided(err: Exception, specs: Sequence[Any]) -> tuple[str, str] | None:
    """What JAX could not do with symbolic shapes and what the user can do, or None."""
    if type(err).__name__ == "InconclusiveDimensionOperation":
        return "cannot decide a comparison of symbolic dimensions", _DECIDE
    if not isinstance(err, (TypeError, ValueError)):
        return None
    message = str(err)
    if "_DimExpr" in message:  # '_DimExpr' object cannot be interpreted as an integer
        return "needs the concrete value of a symbolic dimension", _CONCRETE
    if isinstance(err, TypeError) and "incompatible shapes" in message:
        symbols = {str(d) for spec in specs for d in spec.shape if not isinstance(d, int)}
        names = set(re.findall(r"[A-Za-z_]\w*", " ".join(symbols)))
        if names & set(re.findall(r"[A-Za-z_]\w*", message)):  # (B, T) vs (1, min(64, T))
            return (
                "cannot decide a comparison of symbolic dimensions (shapes it cannot match)",
                _DECIDE,
            )
    return None


def _flag_positions(specs: Any) -> list[int]:
    """Leaf positions of the scalar bool ``input_params`` (none when there are too many)."""
    first = len(specs.all_specs) - len(specs.params)
    flags = [
        first + i
        for i, (_, spec) in enumerate(specs.params)
        if spec.shape == () and spec.dtype == bool
    ]
    return flags if len(flags) <= _MAX_FLAGS else []


def _branch_on_flags(flat: Callable[..., Any], flags: Sequence[int]) -> Callable[..., Any]:
    """``flat`` with each bool flag a Python constant, chosen by ``lax.cond`` on its value.

    For functions that branch in Python on a runtime flag (Flax's ``deterministic``,
    Equinox's ``inference``): the exported graph holds one If per flag, each branch the
    function traced with that flag's value.
    """

    def branched(*leaves: Any) -> Any:
        def choose(values: list[Any], remaining: Sequence[int]) -> Any:
            if not remaining:
                return flat(*values)
            position, rest = remaining[0], remaining[1:]

            def with_value(flag: bool) -> Callable[[], Any]:
                fixed = list(values)
                fixed[position] = flag
                return lambda: choose(fixed, rest)

            return jax.lax.cond(values[position], with_value(True), with_value(False))

        return choose(list(leaves), list(flags))

    return branched


def retrace(
    fn: Callable[..., Any],
    specs: Sequence[Any],
    registry: Any,
    plugin_set: Any,
    enclosing: str,
    *,
    interceptions: Sequence[Any] = (),
    within: str = "a lowering's decomposition",
) -> Any:
    """Trace ``fn`` on ``specs`` while lowering (a decomposition, a subgraph body).

    Every jaxpr made after the first trace goes through here, so a primitive
    no plugin lowers is reported like one in the user's function, at the
    user's line ``enclosing``. ``interceptions`` are active while ``fn``
    traces (a library primitive's implementation is library code like the
    user's; a plugin's own decomposition needs none).
    """
    with interceptions_active(interceptions):
        closed = jax.make_jaxpr(fn)(*specs)
    check_supported(closed, registry, plugin_set, enclosing, within)
    return closed


def record_calls(closed: Any, path: str | os.PathLike[str]) -> None:
    """Write one line per equation (nested ones included): primitive, avals, params, line."""
    with open(path, "w", encoding="utf-8") as out:
        for eqn, line in iter_equations(closed):
            ins = ", ".join(v.aval.str_short() for v in eqn.invars)
            outs = ", ".join(v.aval.str_short() for v in eqn.outvars)
            params = {k: v for k, v in eqn.params.items() if "jaxpr" not in k}
            out.write(f"{eqn.primitive.name}\t({ins}) -> ({outs})\t{params}\t{line}\n")
