"""Family modules imported when a conversion needs them, from a manifest of what they declare.

A plugin with many family modules need not import them all in every process:
``rules.defer(MANIFEST)`` records, for each module, the primitive names it
lowers, the macro primitives it makes and the attributes it intercepts,
without importing it. The module is imported (and its ``register(rules)``
run) the first time one of those is needed:

* a jaxpr holds one of its primitives (the registry looks the name up);
* a conversion starts while the top-level package of one of its interception
  targets is imported (the same condition under which the interception would
  be installed);
* someone reads the plugin's ``lowerings``, ``interceptions``, ``macros`` or
  ``cases`` (the testkit, the coverage table, the CLI): then every deferred
  module loads.

The manifest is generated from the modules themselves with :func:`manifest`:
``jax2onnx manifest PLUGIN`` writes it as ``_manifest.py`` next to the plugin
module, for the family modules that module lists in ``FAMILIES``. The testkit
checks that it still matches what the modules declare, so a stale manifest
fails the plugin's tests rather than a user's conversion.
A module that registers a tracing context cannot be deferred (tracing contexts
are entered before anything is known about the jaxpr).
"""

from __future__ import annotations

import dataclasses
import importlib
import pprint
import sys
from collections.abc import Iterable, Mapping, Sequence

KINDS = ("lowers", "macros", "intercepts")


@dataclasses.dataclass(frozen=True)
class DeferredFamily:
    """One family module of a plugin, known by its manifest entry until it is imported.

    Attributes:
        module: the module's import name; it has a ``register(rules)``
            function.
        lowers: the names of the primitives it lowers.
        macros: the names of the macro primitives it makes but does not lower
            (their fallback is looked up by name too).
        intercepts: the attributes it intercepts (targets and aliases).
    """

    module: str
    lowers: tuple[str, ...] = ()
    macros: tuple[str, ...] = ()
    intercepts: tuple[str, ...] = ()

    @classmethod
    def of(cls, module: str, entry: Mapping[str, Sequence[str]]) -> DeferredFamily:
        """The family of ``module`` from its manifest entry (checked)."""
        if not isinstance(module, str) or not module:
            raise TypeError(f"a deferred family is named by its module, got {module!r}")
        unknown = sorted(set(entry) - set(KINDS))
        if unknown:
            raise ValueError(
                f"manifest entry of {module!r} has unknown keys {unknown}; known: {KINDS}"
            )
        fields = {}
        for kind in KINDS:
            names = entry.get(kind, ())
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise TypeError(f"manifest entry {module!r}[{kind!r}] must be a list of names")
            fields[kind] = tuple(names)
        return cls(module, **fields)

    @property
    def names(self) -> tuple[str, ...]:
        """The primitive names whose lookup imports the module."""
        return self.lowers + self.macros

    def wanted_by_imports(self) -> bool:
        """Whether an interception target's top-level package is imported."""
        return any(target.split(".", 1)[0] in sys.modules for target in self.intercepts)


def declarations(plugin: str, module: str) -> dict[str, list[str]]:
    """What ``module.register`` declares on a new ``Rules(plugin)``: its manifest entry.

    Raises:
        ValueError: the module registers a tracing context, which cannot be
            deferred.
    """
    from jax2onnx.rules import Rules

    scratch = Rules(plugin)
    importlib.import_module(module).register(scratch)
    if scratch.tracing_contexts:
        raise ValueError(
            f"{module} registers a tracing context: register it in the plugin's "
            "jax2onnx_rules() (it is entered before the jaxpr is known), not in a deferred module"
        )
    lowers = {lw.primitive for lw in scratch.lowerings}
    entry = {
        "lowers": sorted(lowers),
        "macros": sorted({m.name for m in scratch.macros} - lowers),  # those not lowered here
        "intercepts": sorted(
            {name for i in scratch.interceptions for name in (i.target, *i.aliases)}
        ),
    }
    return {kind: names for kind, names in entry.items() if names}


def manifest(plugin: str, modules: Iterable[str]) -> dict[str, dict[str, list[str]]]:
    """The manifest of ``modules`` (imported now) for ``Rules(plugin).defer``."""
    return {module: declarations(plugin, module) for module in modules}


def source(plugin: str, modules: Iterable[str], command: str) -> str:
    """The manifest of ``modules`` as the text of a Python module defining ``MANIFEST``."""
    body = pprint.pformat(manifest(plugin, modules), indent=1, width=99, sort_dicts=False)
    return (
        f'"""What each family module of plugin {plugin!r} declares (generated: do not edit).\n\n'
        f"Regenerate with: {command}\n"
        '"""\n\n'
        f"MANIFEST = {body}\n"
    )


def stale(plugin: str, families: Iterable[DeferredFamily], listed: Iterable[str] = ()) -> list[str]:
    """How a plugin's manifest differs from what its modules declare now (empty: it matches).

    ``listed``: module names the plugin lists as its families (its
    ``FAMILIES``); each must have a manifest entry.
    """
    families = list(families)
    problems = [
        f"{module} is listed in FAMILIES but has no manifest entry"
        for module in sorted(set(listed) - {f.module for f in families})
    ]
    for family in families:
        try:
            current = declarations(plugin, family.module)
        except ImportError as err:
            problems.append(f"{family.module} cannot be imported: {err}")
            continue
        for kind in KINDS:
            declared, actual = set(getattr(family, kind)), set(current.get(kind, ()))
            if declared != actual:
                missing = sorted(actual - declared)
                extra = sorted(declared - actual)
                problems.append(
                    f"{family.module} {kind}: not in the manifest {missing}, "
                    f"no longer declared {extra}"
                )
    return problems
