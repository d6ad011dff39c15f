"""Step 3: trace the function to a ClosedJaxpr with interceptions active, and re-trace.

The registry's interceptions (:mod:`jax2onnx.registration.interceptions`) are visible to
this trace only; every primitive of the result must have a lowering, checked
here and again for every jaxpr a lowering traces (:func:`retrace`).

While the first trace runs, :func:`jax2onnx.conversion.specs.new_dimension` gives stand-ins of
functions whose output size depends on the data (``jnp.nonzero``,
``jnp.unique`` ...) a fresh symbolic dimension of this conversion.
"""

from __future__ import annotations

import contextlib
import os
import re
import reprlib
import traceback
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax

from jax2onnx.conversion.caching import EAGER_KEY, JIT_KEY
from jax2onnx.conversion.functions import exporting
from jax2onnx.conversion.specs import new_dimensions
from jax2onnx.conversion.unsupported import check_supported, iter_equations
from jax2onnx.registration.interceptions import interceptions_active
from jax2onnx.values.errors import UsageError
from jax2onnx.values.provenance import user_line_of


def trace(
    fn: Callable[..., Any],
    specs: Any,
    registry: Any,
    plugin_set: Any,
    *,
    described: str | None = None,
    record: str | os.PathLike[str] | None = None,
) -> tuple[Any, Any]:
    """``make_jaxpr`` of ``fn(*positional, **params)`` over the flat leaves of ``specs``.

    The registry's interceptions are active while ``fn`` traces; JAX's errors
    that a user can act on are said in their terms, and a primitive no plugin
    lowers is reported (with its source line) before anything is lowered.
    What ``fn`` returns must be arrays: otherwise a ``UsageError`` names
    ``described`` (the user's function; default: ``fn`` itself).

    With ``record`` (``record_primitive_calls_file``) the traced equations are
    written to that file before they are checked, so a primitive without a
    lowering, or a later failure, still leaves them; when the trace itself
    fails, the file holds the equations traced before the error.

    Returns the ClosedJaxpr and the pytree of output shapes.
    """
    if described is None:
        from jax2onnx.conversion.specs import describe_fn

        described = describe_fn(fn)

    def flat(*leaves):
        args, kwargs = specs.rebuild(leaves)
        return _arrays_only(fn(*args, **kwargs), described)

    try:
        closed, out_shapes = _trace_flat(flat, specs, registry)
    except Exception as err:
        if record is not None:
            _record_failed_trace(err, record)
        raise
    if record is not None:
        record_calls(closed, record)
    check_supported(closed, registry, plugin_set)
    return closed, out_shapes


def _trace_flat(flat: Callable[..., Any], specs: Any, registry: Any) -> tuple[Any, Any]:
    """The ClosedJaxpr and output shapes of ``flat`` (see :func:`trace`), not yet checked."""

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

    def traced(target):
        # a library the function imports while it traces (``import equinox`` inside it)
        # brings interceptions that were not installed: trace once more with them
        nonlocal interceptions
        try:
            result = make_jaxpr(target)
        except Exception:
            if registry.interceptions == interceptions:
                raise
            interceptions = registry.interceptions
            return make_jaxpr(target)
        if registry.interceptions != interceptions:
            interceptions = registry.interceptions
            return make_jaxpr(target)
        return result

    try:
        try:
            closed, out_shapes = traced(flat)
        except jax.errors.ConcretizationTypeError:
            flags = _flag_positions(specs)
            if not flags:
                raise
            # bool flags in Python control flow (``if deterministic:``): one branch per value
            closed, out_shapes = traced(_branch_on_flags(flat, flags))
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
    return closed, out_shapes


_OUTPUTS = (
    "it must return the model's outputs: arrays (bool, integer, float or complex) or "
    "Python numbers, alone or in a pytree (a tuple, list or dict ...)"
)


def _arrays_only(out: Any, described: str) -> Any:
    """``out`` when every leaf is a value JAX traces; a UsageError naming the function if not.

    A function returning ``None`` (or only empty containers) would export a
    model without outputs; one returning a string or an object would fail in
    JAX with a message naming jax2onnx's wrapper instead of the user's function.
    """
    leaves = jax.tree_util.tree_flatten_with_path(out)[0]
    if not leaves:
        what = "None (a missing return statement?)" if out is None else f"{_short(out)}"
        raise UsageError(f"{described} returned {what}, no array; {_OUTPUTS}")
    for path, leaf in leaves:
        try:
            jax.typeof(leaf)
        except TypeError:
            dtype = getattr(leaf, "dtype", None)
            kind = type(leaf).__name__ + (f" of dtype {dtype}" if dtype is not None else "")
            where = f": output {jax.tree_util.keystr(path)} is" if path else " returned"
            what = "not a JAX type" if dtype is not None else "not an array"
            raise UsageError(
                f"{described}{where} a {kind} ({_short(leaf)}), {what}; {_OUTPUTS}"
            ) from None
    return out


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def _short(value: Any) -> str:
    try:
        return _REPR.repr(value)
    except Exception:  # a __repr__ that fails
        return f"<{type(value).__name__} object>"


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


def record_calls(closed: Any, path: str | os.PathLike[str]) -> int:
    """Write one line per equation (nested ones included): primitive, avals, params, line.

    ``closed`` is a (Closed)Jaxpr, or anything with the ``eqns`` of one.
    Returns the number of lines written.
    """
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for eqn, line in iter_equations(closed):
            ins = ", ".join(v.aval.str_short() for v in eqn.invars)
            outs = ", ".join(v.aval.str_short() for v in eqn.outvars)
            params = {k: v for k, v in eqn.params.items() if "jaxpr" not in k}
            out.write(f"{eqn.primitive.name}\t({ins}) -> ({outs})\t{params}\t{line}\n")
            count += 1
    return count


def _record_failed_trace(err: BaseException, path: str | os.PathLike[str]) -> None:
    """Write what was traced before ``err`` stopped the trace; ``err`` gets a note saying so.

    The file is rewritten even when nothing can be recovered, so it never
    shows an earlier conversion's calls. Failing to write it is a note on
    ``err`` too: the user's error is the one raised.
    """
    try:
        count = record_calls(types.SimpleNamespace(eqns=_traced_before(err)), path)
    except Exception as write_err:  # an unwritable path, an equation that cannot be shown
        err.add_note(f"(record_primitive_calls_file {os.fspath(path)!r} not written: {write_err})")
        return
    err.add_note(
        f"(record_primitive_calls_file {os.fspath(path)!r} holds the {count} primitive "
        "call(s) traced before this error)"
    )


def _traced_before(err: BaseException) -> list[Any]:
    """The equations JAX had traced when ``err`` was raised, outermost trace first.

    Best effort, from JAX's trace in progress: the tracers in the locals of
    the failing frames (``flat``'s leaves, the user's ``x``) point at their
    trace, which holds the equations made so far. A nested trace (the body
    of a ``scan`` or a ``jit``) follows the trace it is nested in, whose
    enclosing equation does not exist yet. Empty when JAX keeps them
    elsewhere.
    """
    try:
        from jax._src import core as jax_core
        from jax._src.interpreters import partial_eval as pe
    except ImportError:  # pragma: no cover - a JAX that moved them
        return []
    traces: dict[int, Any] = {}
    chain: BaseException | None = err
    for _ in range(8):  # the error, then what it was raised from
        if chain is None:
            break
        for frame, _line in traceback.walk_tb(chain.__traceback__):
            for value in _tracer_candidates(frame.f_locals.values()):
                if not isinstance(value, jax_core.Tracer):
                    continue
                owner = getattr(value, "_trace", None)
                if isinstance(owner, pe.DynamicJaxprTrace):
                    traces.setdefault(id(owner), owner)
        chain = chain.__cause__
    equations: list[Any] = []
    for owner in traces.values():
        try:
            frame = owner.frame
            get_eqns = getattr(frame, "get_eqns", None)  # older JAX keeps a list
            equations.extend(get_eqns() if get_eqns is not None else frame.eqns)
        except Exception:  # JAX's internals changed: record what the other traces hold
            continue
    return equations


def _tracer_candidates(values: Iterable[Any]) -> Iterable[Any]:
    """Local values and the items of tuples and lists among them (``*args`` ...)."""
    for value in list(values):
        if isinstance(value, (tuple, list)):
            yield from value[:64]
        else:
            yield value
