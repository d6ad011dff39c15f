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
