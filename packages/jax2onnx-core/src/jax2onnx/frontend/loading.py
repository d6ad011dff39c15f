"""Discovering and loading plugins through entry points, with pluggy.

Loading walks the entry points of group ``jax2onnx`` one at a time: a plugin
that fails to import (or whose hook fails) is recorded and warned about, and
the others still load. Environment switches:

* ``JAX2ONNX_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (only the core).
* ``JAX2ONNX_PLUGINS=a,b``: load only these entry points.
* ``JAX2ONNX_DISABLE_PLUGINS=a,b``: do not load these entry points.
* ``JAX2ONNX_STRICT_PLUGINS=1``: a load failure raises instead of warning.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import os
import traceback
import warnings
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from jax2onnx.registration import hookspecs
from jax2onnx.registration.rules import Prepared, Rules
from jax2onnx.values.errors import PluginLoadError

if TYPE_CHECKING:
    from jax2onnx.registration.prepare import PrepareConfig
    from jax2onnx.registration.registry import Registry

ENTRY_POINT_GROUP = hookspecs.ENTRY_POINT_GROUP
CORE_PLUGIN = "core"


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin.

    Attributes:
        name: the entry point's name (``"lax"``; ``"core"`` for the core).
        distribution: the distribution that provides it (``"jax2onnx-lax"``).
        version: that distribution's version (``"?"`` when unknown).
        module: the plugin module's import name.
        rules: its frozen `Rules`, or ``None`` when the plugin implements no
            ``jax2onnx_rules`` hook (it only prepares objects or adds
            commands).
    """

    name: str
    distribution: str
    version: str
    module: str
    rules: Rules | None


@dataclasses.dataclass(frozen=True)
class PluginFailure:
    """A plugin that did not load, and why.

    Attributes:
        name: the entry point's name.
        distribution: the distribution that provides it.
        version: that distribution's version.
        error: ``"ExceptionType: message"``.
        detail: the full traceback.
    """

    name: str
    distribution: str
    version: str
    error: str
    detail: str

    def describe(self) -> str:
        """``"name (distribution version): error"``, one line."""
        return f"{self.name} ({self.distribution} {self.version}): {self.error}"


def _names(value: str | None) -> set[str]:
    return {n.strip() for n in (value or "").split(",") if n.strip()}


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


class PluginSet:
    """The plugins of one configuration: loaded modules, their rules, failures.

    Make one with `PluginSet.load`; `jax2onnx.plugins` is the set ``to_onnx``
    uses.

    Attributes:
        plugins: the loaded plugins, as `PluginInfo`, the core first, then
            the entry points sorted by name.
        failures: the plugins that failed to load, as `PluginFailure`.
    """

    def __init__(
        self,
        manager: pluggy.PluginManager,
        plugins: Sequence[PluginInfo],
        failures: Sequence[PluginFailure],
    ) -> None:
        self._manager = manager
        self.plugins = tuple(plugins)
        self.failures = tuple(failures)
        self._registry = None

    def __repr__(self) -> str:
        names = ", ".join(p.name for p in self.plugins)
        return f"PluginSet([{names}], failures={len(self.failures)})"

    @classmethod
    def load(
        cls,
        *,
        environ: Mapping[str, str] | None = None,
        entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
    ) -> PluginSet:
        """Load the core plugin, then every allowed entry point of group ``jax2onnx``.

        A plugin that fails to import, or whose ``jax2onnx_rules`` hook fails,
        is recorded in ``failures`` with a ``RuntimeWarning``, and the others
        still load. Environment switches: ``JAX2ONNX_DISABLE_PLUGIN_AUTOLOAD=1``
        loads no entry points (the core only); ``JAX2ONNX_PLUGINS=a,b`` loads
        only these; ``JAX2ONNX_DISABLE_PLUGINS=a,b`` skips these;
        ``JAX2ONNX_STRICT_PLUGINS=1`` makes a load failure raise.

        Args:
            environ: the environment to read the switches from (default:
                ``os.environ``).
            entry_points: the entry points to load instead of the installed
                ones (``JAX2ONNX_DISABLE_PLUGIN_AUTOLOAD`` is then ignored;
                the allow and block lists still apply).

        Returns:
            A new `PluginSet`.

        Raises:
            PluginLoadError: a plugin failed while ``JAX2ONNX_STRICT_PLUGINS``
                is set, or a plugin implements a hook that does not exist
                (a misspelled hook name).
        """
        environ = os.environ if environ is None else environ
        strict = _flag(environ.get("JAX2ONNX_STRICT_PLUGINS"))
        allow = _names(environ.get("JAX2ONNX_PLUGINS"))
        block = _names(environ.get("JAX2ONNX_DISABLE_PLUGINS"))
        manager = pluggy.PluginManager(hookspecs.PROJECT)
        manager.add_hookspecs(hookspecs)

        from jax2onnx.builtin import calls as builtin

        modules: list[tuple[str, str, str, ModuleType]] = []
        manager.register(builtin, name=CORE_PLUGIN)
        modules.append((CORE_PLUGIN, "jax2onnx-core", _version("jax2onnx-core"), builtin))
        failures: list[PluginFailure] = []

        if entry_points is None:
            if _flag(environ.get("JAX2ONNX_DISABLE_PLUGIN_AUTOLOAD")):
                entry_points = ()
            else:
                entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        seen: set[str] = set()
        for ep in sorted(entry_points, key=lambda e: e.name):
            if ep.name in seen or ep.name in block or (allow and ep.name not in allow):
                continue
            seen.add(ep.name)
            dist = ep.dist.name if ep.dist is not None else "?"
            version = ep.dist.version if ep.dist is not None else "?"
            try:
                module = ep.load()
                manager.register(module, name=ep.name)
            except Exception as err:  # a broken plugin must not stop the others
                failures.append(_failure(ep.name, dist, version, err, strict))
                continue
            modules.append((ep.name, dist, version, module))
        try:
            manager.check_pending()
        except pluggy.PluginValidationError as err:
            raise PluginLoadError(
                f"a jax2onnx plugin implements a hook that does not exist: {err}. "
                "Hook names are listed in jax2onnx.registration.hookspecs."
            ) from err

        plugins: list[PluginInfo] = []
        for name, dist, version, module in modules:
            try:
                rules = _rules_of(manager, name, module)
            except Exception as err:
                manager.unregister(module)
                failures.append(_failure(name, dist, version, err, strict))
                continue
            plugins.append(PluginInfo(name, dist, version, module.__name__, rules))
        return cls(manager, plugins, failures)

    def rules(self) -> list[Rules]:
        """The frozen `Rules` of every loaded plugin that has some."""
        return [p.rules for p in self.plugins if p.rules is not None]

    def registry(self, extra_rules: Sequence[Rules] = ()) -> Registry:
        """The merged registry of every plugin's rules (plus ``extra_rules``).

        Without ``extra_rules`` the registry is built once and reused. Raises
        `PluginConflictError` when two plugins lower one primitive and
        neither registered it with ``override=True``.
        """
        from jax2onnx.registration.registry import Registry

        if extra_rules:
            return Registry([*self.rules(), *(r.freeze() for r in extra_rules)])
        if self._registry is None:
            self._registry = Registry(self.rules())
        return self._registry

    def prepare(self, fn: Any, config: PrepareConfig) -> Prepared | None:
        """The first ``jax2onnx_prepare`` result for ``fn``, or ``None``."""
        return self._manager.hook.jax2onnx_prepare(fn=fn, config=config)

    def add_commands(self, commands: Any) -> None:
        """Let every plugin add its ``jax2onnx`` subcommands."""
        self._manager.hook.jax2onnx_commands(commands=commands)


def _rules_of(manager: pluggy.PluginManager, name: str, module: ModuleType) -> Rules | None:
    """The plugin's frozen rules, from its own ``jax2onnx_rules`` hook (called through pluggy)."""
    if not hasattr(module, "jax2onnx_rules"):
        return None
    others = [p for p in manager.get_plugins() if p is not module]
    results = manager.subset_hook_caller("jax2onnx_rules", remove_plugins=others)()
    (rules,) = results
    if not isinstance(rules, Rules):
        raise TypeError(f"jax2onnx_rules() returned {type(rules).__name__}, not Rules")
    if rules.name != name and name != CORE_PLUGIN:
        raise ValueError(
            f"entry point {name!r} returned Rules({rules.name!r}); name the Rules after the "
            "entry point (the distribution name without 'jax2onnx-')"
        )
    return rules.freeze()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _failure(name, dist, version, err, strict) -> PluginFailure:
    failure = PluginFailure(
        name, dist, version, f"{type(err).__name__}: {err}", traceback.format_exc()
    )
    if strict:
        raise PluginLoadError(
            f"jax2onnx plugin {failure.describe()} failed to load and "
            "JAX2ONNX_STRICT_PLUGINS=1 is set. Fix or uninstall the plugin, or disable it "
            f"with JAX2ONNX_DISABLE_PLUGINS={name}."
        ) from err
    warnings.warn(
        f"jax2onnx plugin {failure.describe()} failed to load and is skipped; the other "
        f"plugins still work. Disable it with JAX2ONNX_DISABLE_PLUGINS={name}.",
        RuntimeWarning,
        stacklevel=3,
    )
    return failure


@functools.cache
def plugins() -> PluginSet:
    """The plugin set loaded from the environment (once per process, on first use).

    ``to_onnx`` and the ``jax2onnx`` command line use this set. The
    ``JAX2ONNX_*PLUGIN*`` environment variables (see `PluginSet.load`) are
    read on the first call only.

    Returns:
        The cached `PluginSet`: ``plugins()`` returns the same object every
            time.

    Example:
        ```python
        import jax2onnx

        for plugin in jax2onnx.plugins().plugins:
            print(plugin.name, plugin.distribution, plugin.version)
        ```
    """
    return PluginSet.load()
