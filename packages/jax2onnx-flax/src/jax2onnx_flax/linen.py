"""Flax Linen: method stand-ins through Flax's own interceptor, and inference mode.

A Linen layer's ``__call__`` cannot be replaced like an NNX one: Linen wraps
every method at class creation to set up its scope (``self.param`` works only
inside that wrapper). Flax offers ``nn.intercept_methods`` for exactly this;
its interceptors run *inside* the wrapper, per thread. The plugin registers a
tracing context (:meth:`jax2onnx.plugin.Rules.tracing_context`) that pushes
one interceptor while ``to_onnx`` traces. It looks a call up by the method's
own function object (``Dense.__call__`` as written, so a subclass calling
``super().__call__`` is intercepted and a subclass overriding ``__call__`` is
not) and runs the family module's stand-in, which reads the parameters with
``module.param``/``module.variable`` exactly as the layer does and binds the
same macro primitive as the NNX layer (``nn.Dense`` and ``nnx.Linear`` are one
``linear`` primitive, one Gemm). A stand-in that reads stored variables
without ``module.param`` (a dtype looked at before deciding, several
sub-layers' kernels joined) reads them with :func:`jax2onnx_flax._util.linen_params`:
unboxed, as ``module.param`` gives them, so parameters boxed for sharding
(``nn.with_logical_partitioning``) convert as plain ones.

Family modules declare their stand-ins as a module constant::

    LINEN = (LinenStandIn("Dense", "__call__", dense),)

with ``dense(original, module, *args, **kwargs)``; ``original(*args, **kwargs)``
runs Flax's own method (for options the primitive does not cover).

**Inference mode.** A Linen module given to ``to_onnx`` directly (bound, or
inside ``nnx.bridge.ToNNX``) exports as in inference, like an NNX module:
:func:`inference` pushes a second interceptor that, on every module of the
call that has a ``deterministic`` or ``use_running_average`` field, sets it
to True for the duration of its method and clears the same-named argument
(Flax merges attribute and argument and refuses both). An
``nnx.bridge.ToLinen`` builds its NNX module anew inside each call: the
interceptor has it built and then switched as ``model.eval()`` switches an
NNX module (the same switches, on every submodule that has them). The
modules it sees are the clones ``apply`` makes, never the user's objects.
Switches named in ``input_params`` stay runtime inputs, and a bool flag of
the model's own
(``train``) turns pinning off. Outside a conversion only this interceptor
runs, so :func:`jax2onnx.traced_callable` (what the tests compare against)
is Flax's own code in inference mode; while converting it runs outside the
stand-ins, which then see the pinned switches as the layer's own attribute.
A plain function calling ``model.apply(variables, x, train=False)`` keeps
exactly the semantics it spells.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# The switches a Linen module in inference mode has pinned (flax: merge_param names).
INFERENCE_SWITCHES = ("deterministic", "use_running_average")

_PINNED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "jax2onnx_flax_linen_pinned", default=frozenset()
)
# Whether this context's Linen calls already pass through a stand-in interceptor.
_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jax2onnx_flax_linen_active", default=False
)


@dataclasses.dataclass(frozen=True)
class LinenStandIn:
    """``flax.linen.<layer>.<method>`` runs ``stand_in(original, module, *args, **kwargs)``."""

    layer: str
    method: str
    stand_in: Callable[..., Any]


def declared(families: Iterable[str], package: str) -> tuple[LinenStandIn, ...]:
    """The ``LINEN`` stand-ins of the named family modules (imported now)."""
    out: list[LinenStandIn] = []
    for name in families:
        module = importlib.import_module(f"{package}.{name}")
        out.extend(getattr(module, "LINEN", ()))
    return tuple(out)


def _by_function(table: tuple[LinenStandIn, ...]) -> dict[Any, Callable[..., Any]]:
    """Stand-ins by the function object Flax's wrapper calls (``context.orig_method.func``)."""
    from flax import linen as nn

    found = {}
    for entry in table:
        # inherited too: nn.Conv and nn.ConvLocal run _Conv.__call__
        method = getattr(getattr(nn, entry.layer), entry.method)
        found[getattr(method, "__wrapped__", method)] = entry.stand_in
    return found


def _interceptor(by_function: dict[Any, Callable[..., Any]]) -> Callable[..., Any]:
    def intercept(next_fun, args, kwargs, context):
        stand_in = by_function.get(getattr(context.orig_method, "func", None))
        if stand_in is None:
            return next_fun(*args, **kwargs)
        return stand_in(next_fun, context.module, *args, **kwargs)

    return intercept


@contextlib.contextmanager
def _intercepting(table: tuple[LinenStandIn, ...]) -> Iterator[None]:
    from flax import linen as nn

    token = _ACTIVE.set(True)
    try:
        with nn.intercept_methods(_interceptor(_by_function(table))):
            yield
    finally:
        _ACTIVE.reset(token)


def tracing_context(table: tuple[LinenStandIn, ...]) -> Any:
    """The interceptor ``to_onnx`` enters while it traces (``None`` without Linen loaded)."""
    if "flax.linen" not in sys.modules or _ACTIVE.get():
        return None
    return _intercepting(table)


@contextlib.contextmanager
def inference(input_params: Any = None) -> Iterator[None]:
    """Linen calls in this context run in inference mode (see the module docstring)."""
    from flax import linen as nn

    switches = pinned_switches(input_params or {})
    token = _PINNED.set(switches)
    try:
        with nn.intercept_methods(_pinning(switches)) if switches else contextlib.nullcontext():
            yield
    finally:
        _PINNED.reset(token)


def pinned_switches(input_params: Any) -> frozenset[str]:
    """The switches an inference-mode export pins, given the call's ``input_params``."""
    import numpy as np

    own_flags = [
        name
        for name, value in input_params.items()
        if name not in INFERENCE_SWITCHES and _dtype(value) == np.bool_
    ]
    if own_flags:
        return frozenset()
    return frozenset(INFERENCE_SWITCHES) - frozenset(input_params)


def _dtype(value: Any) -> Any:
    """The dtype of an ``input_params`` example (an array, a Python value, a ShapeDtypeStruct)."""
    import numpy as np

    dtype = getattr(value, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(value).dtype


def _pinning(switches: frozenset[str]) -> Callable[..., Any]:
    """An interceptor running each method with the module's ``switches`` set to True."""
    import inspect

    def intercept(next_fun, args, kwargs, context):
        module = context.module
        if context.method_name == "__call__" and _is_to_linen(module):
            return _to_linen_pinned(module, switches, next_fun, args, kwargs)
        fields = getattr(type(module), "__dataclass_fields__", {})
        names = [name for name in switches if name in fields]
        if not names:
            return next_fun(*args, **kwargs)
        try:
            call = inspect.signature(context.orig_method).bind(*args, **kwargs)
        except TypeError:
            return next_fun(*args, **kwargs)  # Flax reports the user's own mistake
        for name in names:
            if name in call.arguments:
                call.arguments[name] = None
        saved = {name: getattr(module, name) for name in names}
        for name in names:
            object.__setattr__(module, name, True)
        try:
            return next_fun(*call.args, **call.kwargs)
        finally:
            for name, value in saved.items():
                object.__setattr__(module, name, value)

    return intercept


def _is_to_linen(module: Any) -> bool:
    wrappers = sys.modules.get("flax.nnx.bridge.wrappers")
    return wrappers is not None and isinstance(module, wrappers.ToLinen)


def _to_linen_pinned(module, switches, next_fun, args, kwargs):
    """``ToLinen`` builds its NNX module anew in every call: build it as ``model.eval()``
    leaves it (the pinned ``switches`` set on every submodule that has them)."""
    build = module.nnx_class
    settings = dict.fromkeys(sorted(switches), True)

    def build_pinned(*build_args, **build_kwargs):
        inner = build(*build_args, **build_kwargs)
        inner.set_attributes(**settings, raise_if_not_found=False)
        return inner

    object.__setattr__(module, "nnx_class", build_pinned)
    try:
        return next_fun(*args, **kwargs)
    finally:
        object.__setattr__(module, "nnx_class", build)


def pinned(switch: str) -> bool:
    """Whether ``switch`` (``"deterministic"``, ``"use_running_average"``) is pinned to True."""
    return switch in _PINNED.get()


def merged(module: Any, name: str, value: Any) -> Any:
    """A Linen switch as the layer resolves it (attribute or call argument), or pinned."""
    from flax.linen.module import merge_param

    if pinned(name):
        return True
    return merge_param(name, getattr(module, name), value)


# -- the objects to_onnx accepts ------------------------------------------------------


def as_bound_call(obj: Any) -> tuple[Any, str | None] | None:
    """``(module, method name)`` for a Linen module (or a method of one), bound or not."""
    from flax import linen as nn

    if isinstance(obj, nn.Module):
        return obj, None
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, nn.Module) and callable(obj):
        return owner, obj.__name__
    return None


def prepare_bound(module: Any, method: str | None, config: Any) -> Any:
    """A pure function applying a bound Linen module's variables in inference mode."""
    from jax2onnx.plugin import Prepared

    if module.scope is None:
        kind = type(module).__name__
        raise TypeError(
            f"{kind} is an unbound Linen module: it holds no weights. Pass "
            f"model.bind(variables) (variables = model.init(key, x)), or a function "
            f"such as lambda x: model.apply(variables, x)"
        )
    variables = module.variables
    unbound = module.clone(parent=None)
    fn = getattr(type(module), method) if method else type(module).__call__

    def pure(*args: Any, **kwargs: Any) -> Any:
        with inference(config.input_params):
            return unbound.apply(variables, *args, method=method, **kwargs)

    _signature(pure, fn)
    name = f"{type(module).__name__}.{method or '__call__'}"
    return Prepared(fn=pure, name=name)


def _signature(pure: Any, fn: Any) -> None:
    """``pure`` takes the method's parameters after ``self`` (input names come from them)."""
    import inspect

    try:
        sig = inspect.signature(getattr(fn, "__wrapped__", fn))
    except (TypeError, ValueError):
        return
    params = list(sig.parameters.values())[1:]
    pure.__signature__ = sig.replace(parameters=params)
    functools.update_wrapper(pure, fn, assigned=("__doc__",), updated=())


def strip_bridge_rngs(copies: Iterable[Any]) -> None:
    """``ToNNX`` submodules of inference copies draw no RNG (their counts are shared).

    ``nnx.merge`` makes new module objects around the user's own Variables, so
    a copy's ``ToNNX`` would advance (or, inside a trace, fail to advance) the
    user's RNG counter; in inference mode no Linen layer needs one.
    """
    if "flax.nnx.bridge" not in sys.modules:
        return
    from flax import nnx

    for copy in copies:
        for _, node in nnx.iter_graph(copy):
            if isinstance(node, nnx.bridge.ToNNX):
                node.to_nnx__rngs = None
