"""The masks of a decomposed attention, as ONNX ``Attention`` takes them (mask, causal).

The logits of the pattern are changed, after the scaling, by terms of two kinds:

* ``("add", w)``: ``s + w``, a bias or an additive mask (``w`` a constant, a
  graph value, or ``Where(c, 0, fill)`` as ``transformers`` builds it);
* ``("where", c, fill)``: ``where(c, s, fill)`` with a scalar ``fill``.

ONNX ``Attention`` computes ``softmax(q k^T * scale + attn_mask)`` (a boolean
``attn_mask`` is "attend where True") and ``is_causal`` keeps the lower
triangle (aligned at the upper left). ONNX Runtime's CPU kernel runs float32,
turns ``False`` into ``finfo.min``, and returns a row of zeros when the
largest logit of a row is ``-inf`` or ``finfo.min`` (a fully masked row),
where JAX gives NaN (``-inf``) or the mean of the values (any finite fill).
So each term is translated to what gives JAX's numbers in every row:

* ``where(c, s, -inf)``: exact only when no row is fully masked, which a
  constant ``c`` shows (then ``is_causal`` for the lower triangle, else the
  boolean constant), or the triangle computed from iotas for a symbolic
  length (:mod:`.causal`: ``is_causal``); another ``c`` computed at run time
  is refused.
* ``where(c, s, fill)`` with a finite ``fill <= -1e9`` (Haiku's ``-1e30``,
  Flax's ``finfo.min``, Keras' ``-1e9``): the additive ``Where(c, 0, BIG)``
  with ``BIG = -0.7 * finfo(float32).max``. A masked logit then weighs exactly
  0 next to any unmasked one (as JAX's ``fill`` does for logits above
  ``fill + 104``), and a fully masked row is uniform, as in JAX: ``s + BIG``
  rounds to ``BIG`` for ``|s| < 1e31``, and ``BIG`` is above ``finfo.min``.
  A larger ``fill`` (``0``, ``-1``) is not a mask ONNX has: refused.
* ``s + Where(c, 0, fill)`` with ``fill <= -1e30`` (``transformers``'
  ``finfo.min``): the same ``Where(c, 0, BIG)``; ``s + fill`` rounds to
  ``fill`` just as ``s + BIG`` rounds to ``BIG``. With ``fill = -inf`` it is
  the ``where`` case above.
* a constant ``w``: when every entry is 0 or a mask value (``-inf`` or
  ``<= -1e30``) and no row is masked entirely, the boolean mask (or
  ``is_causal``) it is (a masked logit weighs exactly 0 either way); else
  kept, with its finite entries ``<= -1e30`` raised to ``BIG`` (same
  argument as above); a row of ``-inf`` only is refused.
* any other ``w`` (an additive mask given as a graph input): kept as it is,
  which is the function ONNX defines. ONNX Runtime differs from JAX only in
  rows whose every entry is ``-inf`` or ``finfo.min`` (zeros, where JAX gives
  NaN or a uniform row); nothing in the graph tells whether such rows occur.

ONNX Runtime's float32 kernel wants a mask of rank 2 to 4 whose second last
dimension is the query length: masks without it get it by broadcasting
against a constant (query length static), or the fusion is refused.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import static_or_symbolic
from jax2onnx.passes.fusion.causal import is_causal
from jax2onnx.passes.fusion.match import constant, node, producer
from jax2onnx.values.ir import ir

F32 = np.float32
BIG = F32(-0.7 * float(np.finfo(F32).max))
LARGE = -1e9  # a finite fill at or below this is a mask
HUGE = -1e30  # s + fill == fill for every logit |s| < 1e22


def uniform(value: ir.Value | None) -> float | None:
    """The one number of a constant whose elements are all equal."""
    array = constant(value)
    if array is None or array.size == 0 or array.dtype.kind not in "fiu":
        return None
    first = array.reshape(-1)[0]
    if not (np.all(array == first) or (np.isnan(first) and np.all(np.isnan(array)))):
        return None
    return float(first)


class Masks:
    """The plan: ``is_causal``, a constant boolean or additive part, run-time float terms."""

    def __init__(self, sq: Any, sk: Any) -> None:
        self.sq, self.sk = sq, sk
        self.causal = False
        self.boolean: np.ndarray | None = None  # a constant "attend" mask
        self.additive: np.ndarray | None = None  # the sum of the constant float terms
        # run-time float terms: ("value", v, pad) or ("where", condition, keep_at, pad)
        self.terms: list[tuple] = []

    def _rows(self, array: np.ndarray) -> np.ndarray | None:
        """``array`` broadcast to ``(..., Sq, Sk)`` (``None`` if the sizes are symbolic)."""
        if not (isinstance(self.sq, int) and isinstance(self.sk, int)) or array.ndim > 4:
            return None
        shape = (1,) * (2 - min(array.ndim, 2)) + array.shape
        try:
            return np.broadcast_to(array.reshape(shape), (*shape[:-2], self.sq, self.sk))
        except ValueError:
            return None

    def _add_constant(self, array: np.ndarray) -> None:
        self.additive = array if self.additive is None else self.additive + array

    def _keep(self, condition: np.ndarray) -> bool:
        """A constant condition without a fully masked row: ``is_causal`` or a boolean mask."""
        rows = self._rows(condition.astype(bool))
        if rows is None or not rows.any(axis=-1).all():
            return False
        tril = np.tril(np.ones((self.sq, self.sk), bool))
        if not self.causal and self.boolean is None and (rows == tril).all():
            self.causal = True
        else:
            self.boolean = rows if self.boolean is None else self.boolean & rows
        return True

    def where(self, condition: ir.Value, fill: float) -> bool:
        """Plan ``where(condition, s, fill)``."""
        if not (fill == -math.inf or (math.isfinite(fill) and fill <= LARGE)):
            return False  # masked logits that still weigh: no ONNX mask does that
        if not self.causal and self.boolean is None and is_causal(condition, self.sq, self.sk):
            self.causal = True  # the triangle of iotas (symbolic lengths): no row masked entirely
            return True
        fixed = constant(condition)
        if fixed is not None and fixed.dtype == np.bool_:
            if self._keep(fixed):
                return True
            rows = self._rows(fixed)
            if fill == -math.inf or rows is None:
                return False  # a fully masked row: NaN in JAX, zeros in ONNX Runtime
            self._add_constant(np.where(rows, F32(0), BIG))
            return True
        if fill == -math.inf or condition.dtype != ir.DataType.BOOL:
            return False
        return self._big_where(condition, 0)

    def add(self, term: ir.Value) -> bool:
        """Plan ``s + term``."""
        fixed = constant(term)
        if fixed is not None:
            rows = self._rows(fixed.astype(F32))
            if rows is None or (rows == -np.inf).all(axis=-1).any():
                return False
            masked = rows <= HUGE
            if ((rows == 0) | masked).all() and self._keep(~masked):
                return True  # 0 or a mask value only, no fully masked row: boolean
            self._add_constant(np.where(np.isfinite(rows) & masked, BIG, rows))
            return True
        select = producer(term, "Where")
        if select is not None and select.inputs[0].dtype == ir.DataType.BOOL:
            branches = [uniform(v) for v in select.inputs[1:]]
            for keep_at, fill in ((0, branches[1]), (1, branches[0])):
                if branches[keep_at] != 0.0 or fill is None:
                    continue
                if fill == -math.inf:  # where(c, s, -inf); swapped, a run-time "mask where c"
                    return keep_at == 0 and self.where(select.inputs[0], fill)
                if math.isfinite(fill) and fill <= HUGE:
                    return self._big_where(select.inputs[0], keep_at)
        pad = self._padding(term)
        if pad is None or term.dtype != ir.DataType.FLOAT:
            return False
        self.terms.append(("value", term, pad))
        return True

    def _big_where(self, condition: ir.Value, keep_at: int) -> bool:
        pad = self._padding(condition)
        if pad is None:
            return False
        self.terms.append(("where", condition, keep_at, pad))
        return True

    def _padding(self, value: ir.Value) -> tuple[int, ...] | None:
        """The ``(Sq|1, Sk|1)`` shape that, broadcast with ``value``, gives it both trailing
        sizes (``None`` when that needs a symbolic size, or the rank is above 4)."""
        shape = static_or_symbolic(value)
        if shape is None or len(shape) > 4:
            return None
        shape = (1,) * (2 - min(len(shape), 2)) + shape
        pad = []
        for have, want in zip(shape[-2:], (self.sq, self.sk), strict=True):
            if have == want:
                pad.append(1)
            elif have == 1 and isinstance(want, int):
                pad.append(want)
            else:
                return None
        return tuple(pad)

    def node_count(self) -> int:
        """How many nodes :meth:`emit` adds at most."""
        count = sum(1 for t in self.terms if t[0] == "where" or any(d != 1 for d in t[2]))
        floats = len(self.terms) + (
            self.additive is not None or (self.boolean is not None and bool(self.terms))
        )
        return count + max(floats - 1, 0)

    def emit(self, ctx: Any, anchor: ir.Node, new: list[ir.Node]) -> ir.Value | None:
        """The ``attn_mask`` (``None``: none); the nodes computing it are appended to ``new``."""
        values = []
        for term in self.terms:
            if term[0] == "where":
                values.append(_big_where(ctx, anchor, term[1], term[2], term[3], new))
            elif any(d != 1 for d in term[2]):
                rows = ctx.constant(np.asarray(term[2], np.int64), "attn_rows")
                expand = node("Expand", [term[1], rows])
                new.append(expand)
                values.append(expand.outputs[0])
            else:
                values.append(term[1])
        if self.boolean is not None and (values or self.additive is not None):
            self._add_constant(np.where(self.boolean, F32(0), BIG))
            self.boolean = None
        if self.boolean is not None:
            return ctx.constant(np.ascontiguousarray(self.boolean), "attn_keep")
        if self.additive is not None:
            values.append(ctx.constant(np.ascontiguousarray(self.additive, F32), "attn_bias"))
        if not values:
            return None
        total = values[0]
        for value in values[1:]:
            add = node("Add", [total, value])
            new.append(add)
            total = add.outputs[0]
        return total


def _big_where(
    ctx: Any, anchor: ir.Node, condition: ir.Value, keep_at: int, pad: tuple, new: list
) -> ir.Value:
    """``Where(condition, zeros(pad), BIG)`` (branches swapped for ``keep_at=1``); an
    identical one computed before ``anchor`` (another layer's) is reused."""
    zeros, big = np.zeros(pad, F32), np.asarray(BIG, F32)
    position = {id(n): i for i, n in enumerate(ctx.graph)}
    for use in condition.uses():
        other = use.node
        if other.op_type != "Where" or use.idx != 0 or other.domain not in ("", "ai.onnx"):
            continue
        kept, filled = constant(other.inputs[1 + keep_at]), constant(other.inputs[2 - keep_at])
        if kept is None or filled is None or kept.shape != zeros.shape or filled.size != 1:
            continue
        if not (kept == 0).all() or filled.reshape(()) != big:
            continue
        if position.get(id(other), len(position)) < position.get(id(anchor), -1):
            return other.outputs[0]
    branches = [None, None]
    branches[keep_at] = ctx.constant(zeros, "attn_zero")
    branches[1 - keep_at] = ctx.constant(big, "attn_big")
    select = node("Where", [condition, *branches])
    new.append(select)
    return select.outputs[0]


def masks_for(terms: list[tuple], sq: Any, sk: Any) -> Masks | None:
    """The plan for ``terms`` (see the module), or ``None`` when one has no exact form."""
    masks = Masks(sq, sk)
    for term in terms:
        ok = masks.where(term[1], term[2]) if term[0] == "where" else masks.add(term[1])
        if not ok:
            return None
    return masks
