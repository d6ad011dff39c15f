"""Interceptions: ``module.attr`` replaced for the conversion that asked, and nobody else.

A module attribute is shared by the whole process, so a conversion cannot
patch it for itself alone. Instead, while at least one conversion needs an
attribute, the attribute holds a *dispatcher*: a wrapper of the original that
calls the stand-in of the conversion running in the current context (a
``contextvars`` value set by :func:`interceptions_active`) and the original
everywhere else: other threads, code outside ``to_onnx``, a conversion that
does not intercept it. The first conversion to need an attribute installs its
dispatcher; the last one to finish puts the original object back. The
:class:`PatchBoard` that counts them is the one piece of process-wide state,
because the attributes it guards are process-wide; it is only touched under
its lock.

Stand-ins are built from the original (never from whatever the attribute
holds at that moment), so a conversion never mistakes another's stand-in for
the original. Restoring happens in ``finally``: after exceptions and
``KeyboardInterrupt`` too.

A target whose top-level package has not been imported is skipped: the
function being traced cannot use it, and tracing must not import Flax or
Equinox for a plain JAX function.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from jax2onnx.registration.macro import default_binder
from jax2onnx.registration.rules import Interception

_MISSING = object()

# The stand-ins of the conversion running in this context, by patched attribute.
_STAND_INS: contextvars.ContextVar[Mapping[tuple[int, str], Callable[..., Any]]] = (
    contextvars.ContextVar("jax2onnx_stand_ins", default={})  # noqa: B039 - never mutated
)


def resolve(target: str, *, load: bool = True) -> tuple[Any, str] | None:
    """The object owning the attribute ``target`` names, and the attribute name.

    With ``load=False`` only modules already imported are considered (an
    alias never makes tracing import a module).
    """
    parts = target.split(".")
    if parts[0] not in sys.modules:
        return None
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        module = sys.modules.get(module_name)
        if module is None and not load:
            continue
        if module is None:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        owner = module
        try:
            for attr in parts[split:-1]:
                owner = getattr(owner, attr)
        except AttributeError:
            return None
        return owner, parts[-1]
    return None


@dataclasses.dataclass
class _Slot:
    """One patched attribute: its original, the dispatcher installed, how many use it."""

    owner: Any
    attr: str
    original: Any
    own: Any  # the owner's own __dict__ entry before patching (_MISSING: inherited)
    dispatcher: Callable[..., Any]
    users: int = 0


# Module objects of the model being traced -> their path in it (set by a prepare hook).
_MODULE_PATHS: contextvars.ContextVar[Mapping[int, tuple[Any, str]]] = contextvars.ContextVar(
    "jax2onnx_module_paths",
    default={},  # noqa: B039 - never mutated: module_paths sets a new mapping
)


@contextlib.contextmanager
def module_paths(paths: Mapping[Any, str] | Sequence[tuple[Any, str]]) -> Iterator[None]:
    """Name the modules of the model being traced, for the graph's metadata.

    A prepare hook that calls a model made of module objects (Flax NNX,
    Equinox) wraps the call in this context with each submodule and its
    path in the model (``blocks.0.attn``). While it is active, an intercepted
    method called on one of these modules runs inside
    ``jax.named_scope(path)``, so the nodes its equation lowers to carry
    ``jax2onnx.module`` metadata and a ``path/`` name prefix. Modules are
    matched by identity; the context is local to the current thread (and
    ``contextvars`` context).

    Args:
        paths: ``(module, path)`` pairs, or a mapping of module to path.
    """
    pairs = paths.items() if isinstance(paths, Mapping) else paths
    merged = dict(_MODULE_PATHS.get())
    merged.update({id(module): (module, path) for module, path in pairs if path})
    token = _MODULE_PATHS.set(merged)
    try:
        yield
    finally:
        _MODULE_PATHS.reset(token)


def _dispatcher(key: tuple[int, str], original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        stand_in = _STAND_INS.get().get(key)
        if stand_in is None:
            return original(*args, **kwargs)
        named = _MODULE_PATHS.get().get(id(args[0])) if args else None
        if named is not None and named[0] is args[0]:
            import jax

            with jax.named_scope(named[1]):
                return stand_in(*args, **kwargs)
        return stand_in(*args, **kwargs)

    return dispatch


class PatchBoard:
    """Which attributes hold a dispatcher, their originals, and how many conversions use each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[tuple[int, str], _Slot] = {}

    def acquire(
        self, owner: Any, attr: str, users: list[_Slot], expect: Any = _MISSING
    ) -> _Slot | None:
        """Count one more user of ``owner.attr`` (appended to ``users``), installing its
        dispatcher if needed.

        ``None`` when the attribute is missing, or (with ``expect``) when its
        original is not ``expect``. Call under :meth:`locked`.
        """
        key = (id(owner), attr)
        slot = self._slots.get(key)
        if slot is None:
            current = getattr(owner, attr, _MISSING)
            if current is _MISSING or (expect is not _MISSING and current is not expect):
                return None
            own = vars(owner).get(attr, _MISSING) if hasattr(owner, "__dict__") else _MISSING
            slot = _Slot(owner, attr, current, own, _dispatcher(key, current))
            self._slots[key] = slot
            slot.users += 1
            users.append(slot)
            setattr(owner, attr, slot.dispatcher)
            return slot
        if expect is not _MISSING and slot.original is not expect:
            return None
        slot.users += 1
        users.append(slot)
        return slot

    def release(self, slot: _Slot) -> None:
        """One user fewer; the last one puts the original back. Call under :meth:`locked`."""
        slot.users -= 1
        if slot.users:
            return
        del self._slots[(id(slot.owner), slot.attr)]
        if getattr(slot.owner, slot.attr, _MISSING) is not slot.dispatcher:
            return  # someone assigned the attribute meanwhile: theirs stays
        if slot.own is _MISSING:
            delattr(slot.owner, slot.attr)
        else:
            setattr(slot.owner, slot.attr, slot.own)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def patched(self) -> list[str]:
        """``owner.attr`` of every attribute holding a dispatcher now (for tests)."""
        with self._lock:
            return sorted(
                f"{getattr(s.owner, '__name__', s.owner)}.{s.attr}" for s in self._slots.values()
            )


BOARD = PatchBoard()


def _stand_in(item: Interception, original: Callable[..., Any]) -> Callable[..., Any]:
    make = item.replacement or (lambda orig: default_binder(orig, item.primitive))
    return make(original)


@contextlib.contextmanager
def interceptions_active(interceptions: Sequence[Interception]) -> Iterator[None]:
    """Let the code traced in this context see every interception's stand-in."""
    acquired: list[_Slot] = []
    stand_ins: dict[tuple[int, str], Callable[..., Any]] = dict(_STAND_INS.get())
    try:
        with BOARD.locked():
            for item in interceptions:
                _install(item, acquired, stand_ins)
        token = _STAND_INS.set(stand_ins)
        try:
            yield
        finally:
            _STAND_INS.reset(token)
    finally:
        with BOARD.locked():
            for slot in reversed(acquired):
                BOARD.release(slot)


def _install(
    item: Interception,
    acquired: list[_Slot],
    stand_ins: dict[tuple[int, str], Callable[..., Any]],
) -> None:
    resolved = resolve(item.target)
    if resolved is None:
        return
    slot = BOARD.acquire(*resolved, acquired)
    if slot is None:
        return
    stand_in = _stand_in(item, slot.original)
    stand_ins[(id(slot.owner), slot.attr)] = stand_in
    for alias in item.aliases:
        found = resolve(alias, load=False)
        if found is None:
            continue
        alias_slot = BOARD.acquire(*found, acquired, expect=slot.original)
        if alias_slot is not None:
            stand_ins[(id(alias_slot.owner), alias_slot.attr)] = stand_in
