"""Where each node comes from: the user's equation behind every ONNX node.

While a jaxpr is lowered, the converter keeps a stack of :class:`Frame`\\ s,
one per equation being lowered. An equation is a *user* equation when it
belongs to the jaxpr ``to_onnx`` traced or to a jaxpr held in a user
equation's parameters (a ``jit``'s body, a ``custom_jvp`` function, a
``scan`` body); equations a rule traces for itself (``ctx.trace``,
``ctx.decompose``, key-data layout ops) are not, and their nodes are
credited to the user equation whose rule emitted them.

Each node gets the :class:`Origin` of its user equation as
``metadata_props`` (``jax2onnx.source``, ``jax2onnx.primitive``,
``jax2onnx.module``) unless ``to_onnx(..., source_metadata=False)``. When a
:class:`Recorder` is attached (:func:`jax2onnx.verify` attaches one), every
user equation lowered into the main graph also leaves a :class:`Record`:
its position in the jaxpr tree, the values holding its outputs and the
nodes its rule emitted.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Iterator
from typing import Any

SOURCE_KEY = "jax2onnx.source"
PRIMITIVE_KEY = "jax2onnx.primitive"
MODULE_KEY = "jax2onnx.module"


@dataclasses.dataclass(frozen=True)
class Origin:
    """The user equation a node was emitted for."""

    primitive: str
    source: str
    module: str

    def props(self) -> dict[str, str]:
        props = {SOURCE_KEY: self.source, PRIMITIVE_KEY: self.primitive}
        if self.module:
            props[MODULE_KEY] = self.module
        return props


@dataclasses.dataclass
class Record:
    """One user equation lowered into the main graph.

    ``path`` locates the equation: ``(i,)`` is equation ``i`` of the traced
    jaxpr, ``(i, k, j)`` equation ``j`` of the ``k``-th jaxpr that equation
    ``i``'s rule lowered inline (a ``jit`` body). ``inlined`` holds those
    jaxprs, by ``k``. ``outputs`` are the values bound to the equation's
    outputs (``None`` for a dropped output); ``names`` their names once the
    lowering is done.
    """

    path: tuple[int, ...]
    eqn: Any
    origin: Origin
    outputs: list[Any] = dataclasses.field(default_factory=list)
    names: list[str | None] = dataclasses.field(default_factory=list)
    nodes: list[Any] = dataclasses.field(default_factory=list)
    inlined: list[Any] = dataclasses.field(default_factory=list)
    in_subgraph: bool = False  # lowered inside a Loop/If/Scan body or a function


@dataclasses.dataclass
class Recorder:
    """The records of one conversion, in lowering order (the jaxpr's order)."""

    records: dict[tuple[int, ...], Record] = dataclasses.field(default_factory=dict)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records.values())

    def seal(self) -> None:
        """Note the names of the output values as the lowering left them; a value an
        ``Identity`` made (``stop_gradient``, a no-op cast), which the clean-up passes
        remove, goes by the name of the value the Identity copies."""
        for record in self.records.values():
            record.names = [
                None if v is None else _through_identities(v).name for v in record.outputs
            ]


def _through_identities(value: Any) -> Any:
    for _ in range(64):
        producer = value.producer()
        if (
            producer is None
            or producer.op_type != "Identity"
            or producer.domain not in ("", "ai.onnx")
        ):
            break
        if not producer.inputs or producer.inputs[0] is None:
            break
        if any(out.is_graph_output() for out in producer.outputs):
            break  # a graph output keeps its own name
        value = producer.inputs[0]
    return value


@dataclasses.dataclass
class Frame:
    """The equation being lowered, as the stack of frames sees it."""

    eqn: Any
    user: bool
    origin: Origin | None
    path: tuple[int, ...] = ()
    scopes: tuple[str, ...] = ()
    record: Record | None = None
    calls: int = 0  # user-level jaxprs this equation's rule lowered so far


def scopes(eqn: Any) -> tuple[str, ...]:
    """The named scopes of ``eqn``'s name stack (Linen modules, ``jax.named_scope``),
    without JAX's transformation markers (``vmap``, ``jvp`` ...)."""
    stack = getattr(getattr(eqn, "source_info", None), "name_stack", None)
    names = []
    for item in getattr(stack, "stack", ()):
        if type(item).__name__ == "Scope" and getattr(item, "name", ""):
            names.append(str(item.name))
    return tuple(names)


def param_jaxprs(eqn: Any) -> Iterator[Any]:
    """The jaxprs (open, as ``Jaxpr``) among ``eqn``'s parameters, nested in lists too."""
    for value in eqn.params.values():
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            jaxpr = getattr(item, "jaxpr", item)
            if hasattr(jaxpr, "eqns") and hasattr(jaxpr, "invars"):
                yield jaxpr


def holds(eqn: Any, jaxpr: Any) -> bool:
    """Whether ``jaxpr`` is one of ``eqn``'s parameters (a user-level nested jaxpr)."""
    return any(inner is jaxpr for inner in param_jaxprs(eqn))


# -- the user's line ------------------------------------------------------------------

UNKNOWN_SOURCE = "<unknown source>"


def source_line(eqn: Any, enclosing: str = UNKNOWN_SOURCE) -> str:
    """The user's source line an equation came from, as ``file:line (function)``.

    Equations traced inside library code (the body of ``jnp.linalg.solve``,
    of ``jax.random.normal`` ...) carry no frame of the user's; they get
    ``enclosing``, the line of the user's call that contains them. Frames in
    jax2onnx's own packages (the core, its plugins and third-party
    ``jax2onnx_*`` plugins: the stand-in an interception installs) are
    skipped, so a macro primitive's equation names the user's call of the
    intercepted function; so are frames of installed libraries (under
    ``site-packages``: Equinox's ``filter_primitive_bind``, lineax) in favour
    of a frame outside them, else of ``enclosing`` when it is known.
    """
    from jax._src import source_info_util

    try:
        frames = [
            f
            for f in source_info_util.user_frames(eqn.source_info.traceback)
            if not _ours(f.file_name)
        ]
        frame = next((f for f in frames if not _installed(f.file_name)), None)
        if frame is None and enclosing != UNKNOWN_SOURCE:
            return enclosing  # library code all the way: the user's call around it
        frame = frame if frame is not None else next(iter(frames), None)
        line = source_info_util._summarize_frame(frame) if frame is not None else ""
    except Exception:  # pragma: no cover - source info is best effort
        line = ""
    return line or enclosing


def user_line_of(tb: Any) -> str | None:
    """The innermost line of the user's own code in a traceback, as ``file:line (function)``.

    For errors raised while tracing, which have no equation yet: frames of
    jax2onnx's packages and of installed libraries (JAX's) are skipped.
    """
    import traceback

    return _innermost_user_frame(traceback.extract_tb(tb))


def user_line() -> str | None:
    """The innermost line of the user's own code on the current call stack.

    For messages raised outside a lowering, where no equation carries the
    line (an interception refusing its arguments while ``fn`` is traced):
    frames of jax2onnx's packages, of installed libraries and of Python's
    own modules are skipped. ``None`` when no frame is the user's.
    """
    import traceback

    return _innermost_user_frame(traceback.extract_stack())


def _innermost_user_frame(frames: Any) -> str | None:
    for frame in reversed(frames):
        name = frame.filename
        if name.startswith("<frozen") or _ours(name) or _installed(name) or _stdlib(name):
            continue
        return f"{name}:{frame.lineno} ({frame.name})"
    return None


@functools.lru_cache(maxsize=1024)
def _stdlib(file_name: str) -> bool:
    import sysconfig

    stdlib = os.path.join(os.path.abspath(sysconfig.get_paths()["stdlib"]), "")
    return os.path.abspath(file_name).startswith(stdlib)


def _installed(file_name: str) -> bool:
    return "site-packages" in file_name or "dist-packages" in file_name


@functools.lru_cache(maxsize=1024)
def _ours(file_name: str) -> bool:
    """Whether ``file_name`` belongs to an imported ``jax2onnx*`` top-level package."""
    if "jax2onnx" not in file_name:
        return False
    path = os.path.abspath(file_name)
    for name, module in list(sys.modules.items()):
        if name.startswith("jax2onnx") and "." not in name and getattr(module, "__file__", None):
            if path.startswith(os.path.join(os.path.dirname(os.path.abspath(module.__file__)), "")):
                return True
    return False
