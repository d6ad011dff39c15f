"""``@onnx_function``: calls that become ONNX functions in the exported model.

Outside ``to_onnx`` a decorated function (or module class) runs exactly as
before. While ``to_onnx`` traces, each call is traced on its own into a body
jaxpr whose closed-over arrays (a module's weights) are turned into explicit
inputs, and one ``onnx_function`` equation is bound with the weights and the
call's array arguments as operands. Lowering that equation emits one node
calling an ONNX function; calls whose bodies have the same structure (the
same jaxpr, including the shapes of their weights) share one
``FunctionProto``, and each call passes its own weights, which stay
initializers of the main graph.

The equation is a primitive with a batching rule that batches the body and
binds the primitive again (``jax.vmap`` keeps the function) and a JVP rule
that differentiates the body (``jax.grad`` inlines it).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("jax2onnx_tracing", default=False)
DEFAULT_NAMESPACE = "custom"


@contextlib.contextmanager
def exporting() -> Iterator[None]:
    """Mark the enclosed trace as a ``to_onnx`` trace (decorated calls become functions)."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@functools.cache
def function_primitive() -> Any:
    """The ``onnx_function`` primitive (created on first use)."""
    from jax._src import core as jcore
    from jax.interpreters import ad, batching, mlir

    prim = jcore.Primitive("onnx_function")
    prim.multiple_results = True

    def impl(*args, body, **_):
        return jcore.jaxpr_as_fun(body)(*args)

    prim.def_impl(impl)
    prim.def_abstract_eval(lambda *avals, body, **_: list(body.out_avals))
    mlir.register_lowering(prim, mlir.lower_fun(impl, multiple_results=True))

    def batch(args, dims, *, body, **params):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        moved = [a if d is None else batching.bdim_at_front(a, d, size) for a, d in zip(args, dims)]
        axes = tuple(0 if d is not None else None for d in dims)
        batched = jax.make_jaxpr(jax.vmap(jcore.jaxpr_as_fun(body), in_axes=axes))(*moved)
        outs = prim.bind(*moved, body=batched, **params)
        return outs, [0] * len(outs)

    def jvp(primals, tangents, *, body, **_):
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return jax.jvp(jcore.jaxpr_as_fun(body), tuple(primals), tuple(tangents))

    batching.primitive_batchers[prim] = batch
    ad.primitive_jvps[prim] = jvp
    return prim


def _is_array(value: Any) -> bool:
    return isinstance(value, (jax.Array, jax.core.Tracer, np.ndarray, np.generic))


def _call_as_function(
    call: Callable[..., Any], args: tuple, kwargs: dict, *, op_type: str, domain: str, instance: Any
) -> Any:
    """Trace ``call(*args, **kwargs)`` into a body and bind it as one function call."""
    from jax._src import core as jcore
    from jax._src.interpreters import partial_eval as pe

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    dynamic = [i for i, leaf in enumerate(leaves) if _is_array(leaf)]

    def body(*arrays):
        filled = list(leaves)
        for i, array in zip(dynamic, arrays):
            filled[i] = array
        a, k = jax.tree_util.tree_unflatten(tree, filled)
        return call(*a, **k)

    arrays = [leaves[i] for i in dynamic]
    closed, out_shape = jax.make_jaxpr(body, return_shape=True)(*arrays)
    n_params = len(closed.consts)
    open_body = pe.convert_constvars_jaxpr(closed.jaxpr)
    body_jaxpr = jcore.ClosedJaxpr(open_body, ())
    outs = function_primitive().bind(
        *closed.consts,
        *arrays,
        body=body_jaxpr,
        op_type=op_type,
        domain=domain,
        instance=instance,
        n_params=n_params,
    )
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), outs)


def onnx_function(
    target: Callable[..., Any] | type | None = None,
    *,
    unique: bool = False,
    namespace: str | None = None,
    name: str | None = None,
    type: str | None = None,  # noqa: A002 - the public jax2onnx keyword
) -> Any:
    """Export each call of a function, or of a module class, as an ONNX function.

    Use it bare (``@onnx_function``) or with options
    (``@onnx_function(type="Block")``). On a class, calls of its instances
    (``__call__``) are exported; a class without ``__call__`` is left as it is
    (its methods inline into the graph). Calls whose bodies have the same
    structure share one ``FunctionProto``; the arrays a call closes over (a
    module's weights) are passed as its first inputs and stay initializers
    of the main graph. Outside ``to_onnx`` the decorator changes nothing: the
    call runs as written, under ``jax.jit``, ``jax.grad`` and ``jax.vmap``
    alike.

    Args:
        target: the function or class, when the decorator is used bare.
        unique: one function per module instance (per call for a plain
            function) instead of one per distinct body structure.
        namespace: the ONNX domain of the function (default ``"custom"``).
        name: the same as ``type``, used when ``type`` is not given.
        type: the function's op type, shown on the call nodes (and in
            Netron); defaults to the function's or class's name.

    Returns:
        The decorated function or class, or, without ``target``, the
            decorator.

    Raises:
        ValueError: ``namespace`` is empty or not a string, or ``type`` or
            ``name`` is not an identifier.
        TypeError: the decorated object is neither a function nor a class.

    Example:
        ```python
        import jax.numpy as jnp
        from jax2onnx import onnx_function, to_onnx

        @onnx_function(type="Block")
        def block(x):
            return jnp.tanh(x) * 2

        model = to_onnx(lambda x: block(block(x)), [(3,)])
        assert [n.op_type for n in model.graph.node] == ["Block", "Block"]
        ```
    """
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise ValueError(f"onnx_function: namespace must be a non-empty string, got {namespace!r}")
    for label, value in (("type", type), ("name", name)):
        if value is not None and (not isinstance(value, str) or not value.isidentifier()):
            raise ValueError(
                f"onnx_function: {label} must be an identifier (it names an ONNX op), got {value!r}"
            )
    domain = namespace or DEFAULT_NAMESPACE

    def decorate(obj: Any) -> Any:
        op_type = type or name or getattr(obj, "__name__", None) or "Function"
        if inspect.isclass(obj):
            return _decorate_class(obj, op_type, domain, unique)
        if not callable(obj):
            raise TypeError(f"@onnx_function applies to a function or a class, got {obj!r}")
        counter = itertools.count(1)

        @functools.wraps(obj)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _ACTIVE.get():
                return obj(*args, **kwargs)
            instance = next(counter) if unique else None
            return _call_as_function(
                obj, args, kwargs, op_type=op_type, domain=domain, instance=instance
            )

        wrapper.__jax2onnx_function__ = (op_type, domain, unique)
        return wrapper

    if target is not None:
        return decorate(target)
    return decorate


def _decorate_class(cls: type, op_type: str, domain: str, unique: bool) -> type:
    owner = next((k for k in cls.__mro__ if "__call__" in k.__dict__), None)
    original = owner.__dict__["__call__"] if owner is not None else None
    if original is None:
        # nothing to export (a helper module used through other methods): the class stays
        # as it is, as jax2onnx 0.17 leaves it; its computations inline into the caller
        cls.__jax2onnx_function__ = (op_type, domain, unique)
        return cls

    @functools.wraps(original)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        if not _ACTIVE.get():
            return original(self, *args, **kwargs)
        instance = id(self) if unique else None
        bound = functools.partial(original, self)
        return _call_as_function(
            bound, args, kwargs, op_type=op_type, domain=domain, instance=instance
        )

    cls.__call__ = __call__
    cls.__jax2onnx_function__ = (op_type, domain, unique)
    return cls
