"""The merged view of every loaded plugin's rules."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

from jax2onnx.registration.rules import Interception, Lowering, Rules
from jax2onnx.values.errors import PluginConflictError


class Registry:
    """Lowerings by primitive name, interceptions and cases, conflicts resolved.

    Family modules a plugin deferred (`Rules.defer`) are imported when a
    name they lower is looked up, or when a conversion reads
    ``interceptions`` while one of their targets' packages is imported; the
    tables are rebuilt after each such import. A name that more than one
    plugin lowers is loaded at once, so conflicts between plugins are decided
    as if nothing were deferred.
    """

    def __init__(self, rules: Sequence[Rules]) -> None:
        self.rules = tuple(rules)
        self._lock = threading.RLock()
        claims: dict[str, set[str]] = {}  # primitive name -> the plugins lowering it
        for r in self.rules:
            lowerings, _, _, deferred = r.snapshot()
            names = {lw.primitive for lw in lowerings}
            names.update(n for family in deferred for n in family.names)
            for name in names:
                claims.setdefault(name, set()).add(r.name)
        for r in self.rules:
            shared = [f.module for f in r.deferred if any(len(claims[n]) > 1 for n in f.names)]
            r.load_deferred(shared)
        self._build()

    def _build(self) -> None:
        # Two tables: rules for equations on real values, rules for equations with
        # complex values (values="any" rules are in both). In each, one plugin owns a
        # primitive (with all its min_opset variants); a second plugin lowering it,
        # at any min_opset, conflicts unless exactly one of the two says
        # override=True, which then replaces the other's.
        snapshots = [(r, r.snapshot()) for r in self.rules]
        loaded = [lw for _, (lowerings, *_) in snapshots for lw in lowerings]
        tables: dict[str, dict[str, list[Lowering]]] = {}
        for table in ("real", "complex"):
            owned = _owners([lw for lw in loaded if table in lw.tables])
            tables[table] = {
                name: sorted(lowerings, key=lambda lw: -lw.min_opset)
                for name, lowerings in sorted(owned.items())
            }
        pending: dict[str, list[tuple[Rules, str]]] = {}
        for r, (_, _, _, deferred) in snapshots:
            for family in deferred:
                for name in family.names:
                    pending.setdefault(name, []).append((r, family.module))
        self._tables = tables
        self._by_name = tables["real"]
        self._interceptions: tuple[Interception, ...] = tuple(
            i for _, (_, interceptions, _, _) in snapshots for i in interceptions
        )
        self.tracing_contexts: tuple[Callable[[], Any], ...] = tuple(
            f for r in self.rules for f in r.tracing_contexts
        )
        self._impls = {
            m.name: m.impl
            for _, (_, _, macros, _) in snapshots
            for m in macros
            if m.impl is not None
        }
        self._pending = pending
        self._built_at = tuple(len(deferred) for _, (*_, deferred) in snapshots)

    def _loaded_state(self) -> tuple[int, ...]:
        # how many modules each plugin still defers: changes when anyone loads one
        return tuple(len(r.deferred) for r in self.rules)

    def _load(self, wanted: Sequence[tuple[Rules, str]] = ()) -> None:
        """Import ``wanted`` (rules, module) pairs; rebuild if any module loaded since the
        last build (here, or by someone reading a plugin's rules)."""
        if not wanted and self._built_at == self._loaded_state():
            return
        with self._lock:
            for rules, module in wanted:
                rules.load_deferred([module])
            if self._built_at != self._loaded_state():
                self._build()

    def _ensure(self, name: str) -> None:
        """Import the deferred module that lowers ``name``, if any."""
        pending = self._pending.get(name)
        if pending:
            self._load(pending)

    @property
    def interceptions(self) -> tuple[Interception, ...]:
        """Every loaded interception, after importing the deferred modules whose targets'
        packages are imported now (their interceptions would be installed)."""
        wanted = [(r, f.module) for r in self.rules for f in r.deferred if f.wanted_by_imports()]
        self._load(wanted)
        return self._interceptions

    def __contains__(self, name: str) -> bool:
        self._ensure(name)
        return name in self._by_name or name in self._tables["complex"]

    def lowerings(self, name: str, *, complex: bool = False) -> list[Lowering]:
        """Every lowering of ``name`` (for complex values), newest ``min_opset`` first."""
        self._ensure(name)
        return list(self._table(complex).get(name, ()))

    def handles(self, name: str, *, complex: bool = False) -> bool:
        """Whether ``name`` can be lowered (on complex values): a rule, or its fallback."""
        self._ensure(name)
        if name in self._table(complex):
            return True
        return complex and self.fallback(name) is not None

    def lookup(self, name: str, opset: int, *, complex: bool = False) -> Lowering | None:
        """The lowering of ``name`` with the newest ``min_opset`` not above ``opset``.

        Below the oldest one, a primitive with a fallback (a macro's ``impl``)
        is inlined as JAX computes it, so a newer ONNX op never makes an older
        opset fail; without one, None. With ``complex=True``, the rule for
        equations with complex values; a primitive without one that has a
        fallback inlines it (the fallback's equations have complex rules of
        their own).
        """
        self._ensure(name)
        lowerings = self._table(complex).get(name, ())
        for lowering in lowerings:
            if lowering.min_opset <= opset:
                return lowering
        if self.fallback(name) is not None:
            if lowerings:
                return dataclasses.replace(lowerings[-1], fn=inline_fallback, min_opset=1)
            if complex and name in self._by_name:
                return dataclasses.replace(
                    self._by_name[name][-1], fn=inline_fallback, min_opset=1, values="complex"
                )
        return None

    def implementation(self, primitive: Any) -> Lowering | None:
        """For a primitive no plugin lowers, a rule inlining its own JAX implementation
        (:mod:`jax2onnx.registration.implementations`); None when it has none worth tracing."""
        from jax2onnx.registration import implementations

        if primitive.name in self or implementations.implementation(primitive) is None:
            return None
        return Lowering(
            primitive=primitive.name,
            fn=implementations.inline_implementation,
            plugin="core",
            values="any",
        )

    def _table(self, complex: bool) -> dict[str, list[Lowering]]:
        return self._tables["complex" if complex else "real"]

    def fallback(self, name: str) -> Callable[..., Any] | None:
        """JAX's computation of ``name``: its rule's ``fallback=``, or its macro ``impl``."""
        self._ensure(name)
        for lowering in self._by_name.get(name, ()):
            if lowering.fallback is not None:
                return lowering.fallback
        return self._impls.get(name)


def inline_fallback(ctx: Any, *inputs: Any, **params: Any) -> Any:
    """The primitive as JAX computes it (its fallback), inlined."""
    return ctx.fallback(*inputs, **params)


def _owners(lowerings: Sequence[Lowering]) -> dict[str, list[Lowering]]:
    owned: dict[str, list[Lowering]] = {}
    for lowering in lowerings:
        current = owned.get(lowering.primitive)
        if current is None:
            owned[lowering.primitive] = [lowering]
            continue
        existing = current[0]
        same_plugin = existing.plugin == lowering.plugin
        clash = next((c for c in current if c.min_opset == lowering.min_opset), None)
        if same_plugin and clash is None:
            current.append(lowering)
            continue
        existing_override = any(c.override for c in current)
        if lowering.override and not existing_override and not same_plugin:
            owned[lowering.primitive] = [lowering]
        elif existing_override and not lowering.override and not same_plugin:
            continue
        else:
            other = clash or existing
            raise PluginConflictError(
                f"plugins {other.plugin!r} ({other.where}) and "
                f"{lowering.plugin!r} ({lowering.where}) both lower primitive "
                f"{lowering.primitive!r}. Register one of them with override=True, "
                f"or disable a plugin with JAX2ONNX_DISABLE_PLUGINS."
            )
    return owned
