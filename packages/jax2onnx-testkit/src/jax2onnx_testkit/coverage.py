"""The coverage table: each lowered primitive with its ONNX ops, opsets, dtypes and cases.

The ONNX ops are those the rule really emitted while converting the
primitive's cases (the ``f32-static`` variant of each), so the table cannot
drift from the code. The opsets and the vmap/grad column are read from the
rules: where each lowering starts (``min_opset``), what happens below it, and
for a plugin's own (macro) primitives the batching and JVP strategies.
``jax2onnx coverage`` prints the table; ``--markdown`` writes the form kept in
``docs/coverage.md``; ``--update FILE`` rewrites such a file converting only the
rows whose declaration changed (and those named with ``--primitive``).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Collection, Sequence
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass
class CoverageRow:
    """One row of the table: a primitive (or primitives sharing one rule) of one plugin."""

    plugin: str
    primitive: str
    ops: set[str] = dataclasses.field(default_factory=set)
    dtypes: set[str] = dataclasses.field(default_factory=set)
    cases: int = 0
    #: the opsets the rules cover, e.g. ``"13-26"`` or ``"17-26; below: JAX's arithmetic"``
    opsets: str = "13-26"
    #: how ``jax.vmap`` and ``jax.grad`` treat the primitive
    transforms: str = "JAX's rules"
    errors: list[str] = dataclasses.field(default_factory=list)
    #: cases marked ``xfail`` (a documented gap) that failed as they say
    known_gaps: list[str] = dataclasses.field(default_factory=list)
    #: the ONNX ops cell kept from an earlier table (``update``), instead of converting
    kept_ops: str | None = None

    def declared(self) -> list[str]:
        """The cells the rules declare: opsets, dtypes, vmap / grad, cases."""
        return [self.opsets, " ".join(sorted(self.dtypes)) or "-", self.transforms, str(self.cases)]


def _case_dtypes(case: Any, precision: str) -> set[str]:
    from jax2onnx_testkit.check import input_dtype

    names = set()
    for i, spec in enumerate(case.inputs):
        if isinstance(spec, tuple):
            names.add(np.dtype(input_dtype(case, i, precision)).name)
        else:
            dtype = np.asarray(spec).dtype
            if precision == "f32" and dtype == np.float64:
                dtype = np.dtype(np.float32)
            names.add(dtype.name)
    return names


OLDEST, NEWEST = 13, 26


def _opsets(lowerings: Sequence[Any], name: str, is_macro: bool) -> str:
    """The opsets ``name``'s lowerings cover, and what happens below the oldest."""
    starts = sorted({max(OLDEST, lw.min_opset) for lw in lowerings if lw.primitive == name})
    text = f"{starts[0]}-{NEWEST}"
    if len(starts) > 1:
        text += f" (other form from {', '.join(map(str, starts[1:]))})"
    if starts[0] > OLDEST:
        inlined = is_macro or any(
            lw.fallback is not None for lw in lowerings if lw.primitive == name
        )
        text += "; below: JAX's arithmetic" if inlined else "; refused below"
    return text


def coverage(
    plugin_names: Sequence[str] | None = None,
    *,
    convert: bool = True,
    only: Collection[tuple[str, str]] | None = None,
) -> list[CoverageRow]:
    """Rows for every primitive lowered by the named plugins (default: all).

    Args:
        plugin_names: the plugins to cover; ``None`` covers every loaded plugin.
        convert: convert each case to learn the ONNX ops its rule emits. Without
            it (fast) the rows hold what the rules declare: opsets, vmap/grad,
            dtypes and case counts, and no ops.
        only: with ``convert``, convert the cases of these ``(plugin, row label)``
            rows only; the others get no ops.
    """
    import jax2onnx
    from jax2onnx_testkit.check import case_specs, variants_of

    plugin_set = jax2onnx.plugins()
    # a plugin may declare cases for another plugin's primitive (flax's for nn.dropout):
    # its row describes the rules that lower it, wherever they come from
    lowerings = [lw for p in plugin_set.plugins if p.rules for lw in p.rules.lowerings]
    macros = {m.name: m for p in plugin_set.plugins if p.rules for m in p.rules.macros}
    rows: dict[tuple[str, str], CoverageRow] = {}

    def row_for(plugin: str, primitive: str) -> CoverageRow:
        if (plugin, primitive) not in rows:
            row = rows[plugin, primitive] = CoverageRow(plugin, primitive)
            first = primitive.split(", ")[0]
            rules_of = [lw for lw in lowerings if lw.primitive == first]
            own = [lw for lw in rules_of if lw.plugin == plugin]
            if rules_of:
                row.opsets = _opsets(own or rules_of, first, first in macros)
            if first in macros:
                row.transforms = f"{macros[first].batching} / {macros[first].jvp}"
        return rows[plugin, primitive]

    for plugin in plugin_set.plugins:
        rules = plugin.rules
        if rules is None or (plugin_names and plugin.name not in plugin_names):
            continue
        # primitives one function lowers (aliases such as jit/pjit) share a row; of a
        # primitive's lowerings (real, complex), the widest sharing names the row, so the
        # row does not depend on the order the family modules loaded in
        label: dict[str, str] = {}
        for lowering in rules.lowerings:
            names = list(
                dict.fromkeys(lw.primitive for lw in rules.lowerings if lw.fn is lowering.fn)
            )
            known = label.get(lowering.primitive)
            if known is None or len(names) > len(known.split(", ")):
                label[lowering.primitive] = ", ".join(names)
        for name in label:
            row_for(plugin.name, label[name])
        for component, case in rules.cases:
            row = row_for(plugin.name, label.get(component, component))
            row.cases += 1
            for variant in variants_of(plugin.name, component, case):
                if not variant.dynamic:
                    row.dtypes |= _case_dtypes(case, variant.precision)
                if variant.precision != "f32" or case.skip or not convert:
                    continue
                if only is not None and (plugin.name, row.primitive) not in only:
                    continue
                sizes = None if variant.dynamic else {s: case.sizes(s)[0] for s in case.symbols}
                try:
                    fn = case.fn() if case.factory else case.fn
                    with jax.enable_x64(False):
                        result = jax2onnx.convert(
                            fn,
                            case_specs(case, "f32", sizes),
                            input_params=case.input_params,
                            opset=case.opset or 23,
                        )
                except Exception as err:  # reported in the table, not hidden
                    if case.xfail:
                        row.known_gaps.append(case.name)
                    else:
                        row.errors.append(f"{case.name}: {type(err).__name__}")
                    continue
                for name in row.primitive.split(", "):
                    row.ops |= result.report.emitted_ops.get(name, frozenset())
    return sorted(rows.values(), key=lambda r: (r.plugin, r.primitive))


def render(rows: Sequence[CoverageRow], *, markdown: bool) -> str:
    """The table as aligned text, or with ``markdown=True`` as ``docs/coverage.md``."""
    header = ["plugin", "primitive", "ONNX ops", "opsets", "dtypes", "vmap / grad", "cases"]
    body = []
    for r in rows:
        converted = r.cases - len(r.known_gaps) - len(r.errors)
        ops = " ".join(sorted(r.ops)) or ("(no node: inlined or constant)" if converted else "-")
        if r.kept_ops is not None:
            ops = r.kept_ops
        if r.errors:
            ops += f" [failed: {', '.join(r.errors)}]"
        if r.known_gaps:
            ops += f" [known gap, xfail: {', '.join(r.known_gaps)}]"
        body.append([r.plugin, r.primitive, ops, *r.declared()])
    if markdown:
        lines = [
            "# Coverage",
            "",
            "Generated by `jax2onnx coverage --markdown` from the installed plugins: the ONNX",
            "ops are those each rule emitted while converting its own cases (static and",
            "symbolic shapes). Call-like primitives are inlined: the graph holds the ops of",
            "their body; a static `iota` is a constant. Functions whose output size",
            "depends on the data (`jnp.nonzero`, `jnp.unique` ...) are in",
            "[Getting started](getting_started.md#data-dependent-output-sizes).",
            "",
            "*opsets*: the target opsets each primitive converts at (13 to 26), where a rule",
            "switches to another form, and what a rule that needs a newer op does below its",
            "opset. *vmap / grad*: the primitives JAX defines are batched and differentiated by",
            "JAX itself before conversion; a plugin's own primitives (layers and functions",
            "exported as one op) name their batching and JVP rules: `explicit` (a rule of their",
            "own, e.g. one op over the batch), `elementwise` (batched as it is), `fallback`",
            "(JAX's rules for the computation they stand for), `none (non-differentiable)`.",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        lines += [
            "| " + " | ".join(f"`{c}`" if i == 1 else c for i, c in enumerate(row)) + " |"
            for row in body
        ]
        return "\n".join(lines) + "\n"
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    return (
        "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *body]
        )
        + "\n"
    )


def read_table(path: pathlib.Path) -> dict[tuple[str, str], list[str]]:
    """The rows of a ``--markdown`` table: ``(plugin, primitive)`` -> its seven cells."""
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 7 and cells[1].startswith("`"):
            rows[cells[0], cells[1].strip("`")] = cells
    return rows


def update(
    path: pathlib.Path, plugin_names: Sequence[str] | None = None, primitives: Sequence[str] = ()
) -> list[CoverageRow]:
    """Rows for ``path``'s table brought up to date, converting as little as possible.

    A row keeps its ONNX ops cell when its declaration (opsets, dtypes, vmap/grad,
    case count) is unchanged and none of its primitives is in ``primitives``; new
    rows, changed ones and the named ones are converted. A rule whose emitted ops
    changed with no change to its cases must be named: the table cannot see it.
    """
    committed = read_table(path)
    fresh = coverage(plugin_names, convert=False)
    stale = {
        (r.plugin, r.primitive)
        for r in fresh
        if committed.get((r.plugin, r.primitive), [None] * 3)[3:] != r.declared()
        or set(r.primitive.split(", ")) & set(primitives)
    }
    rows = coverage(plugin_names, only=stale) if stale else fresh
    for row in rows:
        if (row.plugin, row.primitive) not in stale:
            row.kept_ops = committed[row.plugin, row.primitive][2]
    return rows
