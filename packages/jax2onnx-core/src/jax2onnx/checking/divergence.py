"""What ``verify`` reports: how far ONNX Runtime's value is from JAX's, per equation.

:func:`error` measures one value against JAX's at dtype-aware tolerances;
:class:`Entry` is one compared equation, :class:`VerifyReport` the whole
account with its readable :meth:`VerifyReport.summary`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

# (rtol, atol) per dtype; atol is scaled by the largest magnitude of JAX's value (at least 1)
TOLERANCES = {
    "float64": (1e-7, 1e-10),
    "float32": (1e-3, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (4e-2, 1e-2),
}


@dataclasses.dataclass(frozen=True)
class Error:
    """How far ONNX Runtime's value is from JAX's."""

    max_abs: float
    max_rel: float  # over the elements whose JAX magnitude exceeds the absolute tolerance
    within: bool  # inside the tolerance
    nonfinite: int = 0  # elements non-finite in ONNX Runtime but finite in JAX

    def text(self) -> str:
        extra = f", {self.nonfinite} non-finite where JAX's are finite" if self.nonfinite else ""
        verdict = "within tolerance" if self.within else "DEPARTS"
        return f"max abs {self.max_abs:.2e}, max rel {self.max_rel:.2e}{extra} ({verdict})"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One compared equation.

    Attributes:
        index: the equation's position (``"12"``, or ``"12.0.3"`` inside the
            body of equation 12 that was lowered inline).
        primitive, source, module: what the node metadata says.
        avals: the output types, as ``float32[4,16]``.
        error: the worst output's `Error`.
        inputs: per input, its `Error` when its ONNX value was compared
            (``None``: a constant, or a value the passes fused away).
        local: the error of ONNX Runtime's output against JAX recomputing
            the equation from ONNX Runtime's inputs: what the ONNX ops alone
            get wrong. Only for the first departure.
        carried: how far JAX's result moves when JAX itself computes the
            equation from ONNX Runtime's inputs instead of its own: the
            inputs' difference as it comes out of this equation. Only for
            the first departure.
        nodes: the ONNX nodes (``OpType name``) holding its outputs, and
            those its rule emitted that are still in the graph.
        note: what could not be compared (a Loop body, a fused value ...).
    """

    index: str
    primitive: str
    source: str
    module: str
    avals: str
    error: Error
    inputs: tuple[Error | None, ...] = ()
    local: Error | None = None
    carried: Error | None = None
    nodes: tuple[str, ...] = ()
    note: str = ""

    def input_error(self) -> float:
        """The largest absolute error among the compared inputs (0.0: they agree exactly)."""
        return max((e.max_abs for e in self.inputs if e is not None), default=0.0)

    def verdict(self) -> str:
        """Where the error comes from, as far as recomputing the equation tells."""
        local, carried = self.local, self.carried
        if local is None or carried is None:
            return "not recomputed"
        if not local.within and carried.within:
            return (
                "the error starts here: from the same inputs JAX and ONNX Runtime disagree "
                f"(max abs {local.max_abs:.1e}), while the inputs' own difference (up to "
                f"{self.input_error():.1e}) moves JAX's result by {carried.max_abs:.1e} only"
            )
        if local.within and not carried.within:
            return (
                "the error is carried in and amplified here: from the same inputs JAX and "
                f"ONNX Runtime agree, but the inputs' difference (up to {self.input_error():.1e}, "
                f"within tolerance) alone moves JAX's result by {carried.max_abs:.1e}"
            )
        if not local.within:
            return (
                "the equation is ill-conditioned on these inputs: their small difference (up "
                f"to {self.input_error():.1e}) moves JAX's own result by {carried.max_abs:.1e}, "
                f"and from the same inputs JAX and ONNX Runtime still differ by "
                f"{local.max_abs:.1e}"
            )
        return "small differences from the inputs and from the ops add up here"


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found.

    Attributes:
        ok: every compared value and every output within tolerance.
        first: the first departing equation (``None`` when there is none).
        entries: every compared equation, in the jaxpr's order.
        outputs: the graph outputs, by name, compared at the given tolerance.
        equations: how many user equations the jaxpr has (nested ones too).
        uncompared: how many had no value left in the ONNX graph (fused into
            one op with the next, folded to a constant, or inside a body).
        notes: remarks on what could not be compared.
    """

    ok: bool
    first: Entry | None
    entries: tuple[Entry, ...]
    outputs: Mapping[str, Error]
    equations: int
    uncompared: int
    notes: tuple[str, ...] = ()

    def departures(self) -> list[Entry]:
        return [e for e in self.entries if not e.error.within]

    def summary(self, rows: int = 12) -> str:
        """A readable account: the first departure in detail, then a table of the
        departing equations (at most ``rows``) and the outputs."""
        lines = [
            f"jax2onnx.verify: {len(self.entries)} of {self.equations} equations compared "
            f"({self.uncompared} have no value of their own in the ONNX graph: fused, "
            "folded or inside a subgraph)"
        ]
        first = self.first
        if first is None:
            lines.append("no equation departs from JAX beyond tolerance")
        else:
            where = f" in {first.module}" if first.module else ""
            lines += [
                f"first departure: equation {first.index} `{first.primitive}` at "
                f"{first.source}{where}",
                f"  output {first.avals}: {first.error.text()}",
            ]
            for i, err in enumerate(first.inputs):
                lines.append(
                    f"  input {i}: "
                    + (
                        err.text()
                        if err is not None
                        else "no ONNX value to compare (a constant, or fused): JAX's is used below"
                    )
                )
            if first.local is not None and first.carried is not None:
                lines.append(
                    f"  JAX from ONNX Runtime's inputs vs ONNX Runtime: {first.local.text()}"
                )
                lines.append(f"  JAX from ONNX Runtime's inputs vs JAX: {first.carried.text()}")
                lines.append(f"  -> {first.verdict()}")
            if first.nodes:
                lines.append(f"  ONNX nodes: {', '.join(first.nodes)}")
            if first.note:
                lines.append(f"  note: {first.note}")
        departing = self.departures()
        if departing:
            table = [["eqn", "primitive", "max abs", "max rel", "source"]]
            for e in departing[:rows]:
                table.append(
                    [
                        e.index,
                        e.primitive,
                        f"{e.error.max_abs:.2e}",
                        f"{e.error.max_rel:.2e}",
                        e.source,
                    ]
                )
            lines.append(f"departing equations ({len(departing)}):")
            lines += _table(table)
        for name, err in self.outputs.items():
            lines.append(f"output {name}: {err.text()}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def tolerance(dtype: Any, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """The ``(rtol, atol)`` used for values of ``dtype``: the given ones, else the table's."""
    default = TOLERANCES.get(np.dtype(dtype).name, TOLERANCES["float32"])
    return (default[0] if rtol is None else rtol, default[1] if atol is None else atol)


def error(want: Any, got: Any, rtol: float | None = None, atol: float | None = None) -> Error:
    """``got`` (ONNX Runtime) against ``want`` (JAX). Non-float values must be equal."""
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape:
        return Error(math.inf, math.inf, False)
    if want.size == 0:
        return Error(0.0, 0.0, True)
    if not np.issubdtype(want.dtype, np.inexact) and want.dtype.name != "bfloat16":
        bad = int(np.count_nonzero(want != got))
        diff = float(np.max(np.abs(want.astype(np.float64) - got.astype(np.float64))))
        return Error(diff, diff, bad == 0)
    r, a = tolerance(want.dtype, rtol, atol)
    w, g = want.astype(np.float64), got.astype(np.float64)
    finite = np.isfinite(w)
    scale = max(1.0, float(np.max(np.abs(w[finite]))) if finite.any() else 1.0)
    both_nan = np.isnan(w) & np.isnan(g)
    same_inf = np.isinf(w) & (w == g)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(both_nan | same_inf, 0.0, np.abs(w - g))
    diff = np.where(np.isnan(diff), np.inf, diff)
    limit = a * scale + r * np.abs(np.where(finite, w, 0.0))
    nonfinite = int(np.count_nonzero(finite & ~np.isfinite(g)))
    big = np.abs(w) > a * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = float(np.max(diff[big] / np.abs(w[big]))) if big.any() else 0.0
    within = bool(np.all(diff <= limit))
    return Error(float(np.max(diff)), rel, within, nonfinite)
