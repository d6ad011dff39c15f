"""The merged view of every loaded plugin's rules."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from jax2onnx.errors import PluginConflictError
from jax2onnx.rules import Interception, Lowering, Rules


class Registry:
    """Lowerings by primitive name, interceptions and cases, conflicts resolved."""

    def __init__(self, rules: Sequence[Rules]) -> None:
        self.rules = tuple(rules)
        # Two tables: rules for equations on real values, rules for equations with
        # complex values (values="any" rules are in both). In each, one plugin owns a
        # primitive (with all its min_opset variants); a second plugin lowering it,
        # at any min_opset, conflicts unless exactly one of the two says
        # override=True, which then replaces the other's.
        self._tables: dict[str, dict[str, list[Lowering]]] = {}
        for table in ("real", "complex"):
            owned = _owners([lw for r in self.rules for lw in r.lowerings if table in lw.tables])
            self._tables[table] = {
                name: sorted(lowerings, key=lambda lw: -lw.min_opset)
                for name, lowerings in sorted(owned.items())
            }
        self._by_name = self._tables["real"]
        self.interceptions: tuple[Interception, ...] = tuple(
            i for r in self.rules for i in r.interceptions
        )
        self.tracing_contexts: tuple[Callable[[], Any], ...] = tuple(
            f for r in self.rules for f in r.tracing_contexts
        )
        self._impls = {m.name: m.impl for r in self.rules for m in r.macros if m.impl is not None}

    def __contains__(self, name: str) -> bool:
        return name in self._by_name or name in self._tables["complex"]

    def lowerings(self, name: str, *, complex: bool = False) -> list[Lowering]:
        """Every lowering of ``name`` (for complex values), newest ``min_opset`` first."""
        return list(self._table(complex).get(name, ()))

    def handles(self, name: str, *, complex: bool = False) -> bool:
        """Whether ``name`` can be lowered (on complex values): a rule, or its fallback."""
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

    def _table(self, complex: bool) -> dict[str, list[Lowering]]:
        return self._tables["complex" if complex else "real"]

    def fallback(self, name: str) -> Callable[..., Any] | None:
        """JAX's computation of ``name``: its rule's ``fallback=``, or its macro ``impl``."""
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
