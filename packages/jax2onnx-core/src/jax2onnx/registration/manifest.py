"""A plugin's manifest: what each of its family modules declares, for ``Rules.defer``.

``jax2onnx manifest PLUGIN`` writes `source` as the plugin's ``_manifest.py``;
the testkit compares it with what the modules declare now (`stale`), so a
stale manifest fails the plugin's tests rather than a user's conversion.
"""

from __future__ import annotations

import importlib
import pprint
from collections.abc import Iterable

from jax2onnx.registration.deferred import KINDS, DeferredFamily
from jax2onnx.registration.rules import Rules


def declarations(plugin: str, module: str) -> dict[str, list[str]]:
    """What ``module.register`` declares on a new ``Rules(plugin)``: its manifest entry.

    Raises:
        ValueError: the module registers a tracing context, which cannot be
            deferred.
    """
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
