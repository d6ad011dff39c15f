"""``FoldReshapesPass``: Reshape chains collapse; Reshapes that keep the shape go."""

from __future__ import annotations

from jax2onnx.values.ir import ir

_SHAPE_ONLY = frozenset(("Reshape", "Squeeze", "Unsqueeze", "Flatten"))


class FoldReshapesPass(ir.passes.InPlacePass):
    """Reshape chains collapse; a Reshape to the shape its input already has goes.

    ``Reshape(Reshape(x, s1), s2)`` (or of a Squeeze/Unsqueeze/Flatten) is
    ``Reshape(x, s2)`` when ``s2`` is a constant whose ``0`` entries (copy the
    input's dimension) copy the same dimension from ``x`` as from the inner
    result: a reshape never changes the element order. A Reshape whose
    constant target keeps every dimension of its input is removed: lowerings
    that split heads and merge them back leave such pairs.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        outputs = {id(v) for v in graph.outputs}
        modified = False
        for node in list(graph):
            if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
                continue
            source, target = node.inputs[0], _target(node)
            inner = source.producer() if source is not None else None
            if (
                target is not None
                and inner is not None
                and inner.op_type in _SHAPE_ONLY
                and inner.domain in ("", "ai.onnx")
                and _zeros_agree(target, inner)
            ):
                node.replace_input_with(0, inner.inputs[0])
                source = inner.inputs[0]
                modified = True
            out = node.outputs[0]
            if id(out) not in outputs and target is not None and _keeps_shape(target, source):
                if out.shape is None:
                    out.shape = source.shape
                ir.convenience.replace_all_uses_with(out, source)
                modified = True
        return ir.passes.PassResult(model, modified)


def _target(node: ir.Node) -> list[int] | None:
    """The constant target shape, with ``allowzero=1`` zeros marked as literal (-2)."""
    value = node.inputs[1]
    if value is None or value.const_value is None:
        return None
    target = [int(d) for d in value.const_value.numpy().reshape(-1)]
    allow_zero = node.attributes.get("allowzero")
    if allow_zero is not None and allow_zero.as_int():
        return [-2 if d == 0 else d for d in target]
    return target


def _dim_equal(x: object, y: object) -> bool:
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    if isinstance(x, ir.SymbolicDim) and isinstance(y, ir.SymbolicDim):
        return x.value is not None and x.value == y.value
    return False


def _zeros_agree(target: list[int], inner: ir.Node) -> bool:
    """Whether every ``0`` of ``target`` copies the same size from ``inner``'s input."""
    old, new = inner.outputs[0], inner.inputs[0]
    copied = _target(inner) if inner.op_type == "Reshape" else None
    for i, d in enumerate(target):
        if d != 0:
            continue
        if copied is not None and i < len(copied) and copied[i] == 0:
            continue  # the inner Reshape copied this very dimension from its input
        if new is None or old.shape is None or new.shape is None:
            return False
        if i >= len(old.shape) or i >= len(new.shape):
            return False
        if not _dim_equal(old.shape[i], new.shape[i]):
            return False
    return True


def _keeps_shape(target: list[int], source: ir.Value | None) -> bool:
    """Whether reshaping ``source`` to ``target`` gives ``source``'s own shape."""
    if source is None or source.shape is None or len(source.shape) != len(target):
        return False
    free = 0
    for d, have in zip(target, source.shape):
        if d == 0:
            continue
        if d == -1:
            free += 1
        elif not (isinstance(have, int) and have == d):
            return False
    return free <= 1
