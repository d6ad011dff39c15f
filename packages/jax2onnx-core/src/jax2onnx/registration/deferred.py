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

The manifest is generated from the modules themselves (:mod:`jax2onnx.registration.manifest`):
``jax2onnx manifest PLUGIN`` writes it as ``_manifest.py`` next to the plugin
module, for the family modules that module lists in ``FAMILIES``. The testkit
checks that it still matches what the modules declare, so a stale manifest
fails the plugin's tests rather than a user's conversion.
A module that registers a tracing context cannot be deferred (tracing contexts
are entered before anything is known about the jaxpr).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence

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
