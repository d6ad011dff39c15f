"""The missing-lowering report: every primitive no plugin lowers, where, and what to do.

Which plugin should lower a primitive comes from the plugins themselves: a
macro primitive carries its plugin's name (``nn.gelu``), and a plugin's
``Rules(libraries=...)`` says whose primitives it lowers (``"jax"`` for JAX's
own). The core names no distribution of its own accord.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from typing import Any

from jax2onnx.values.errors import UnsupportedPrimitiveError
from jax2onnx.values.keys import touches_complex
from jax2onnx.values.provenance import UNKNOWN_SOURCE, source_line

# The modules that define JAX's own primitives (read on the error path only).
_JAX_MODULES = (
    "jax._src.lax.lax",
    "jax._src.lax.slicing",
    "jax._src.lax.control_flow",
    "jax._src.lax.convolution",
    "jax._src.lax.windowed_reductions",
    "jax._src.lax.linalg",
    "jax._src.lax.fft",
    "jax._src.lax.special",
    "jax._src.lax.parallel",
    "jax._src.lax.ann",
    "jax._src.prng",
    "jax._src.random",
    "jax._src.ad_util",
    "jax._src.ad_checkpoint",
    "jax._src.custom_derivatives",
    "jax._src.pjit",
)


def iter_equations(jaxpr: Any, enclosing: str = UNKNOWN_SOURCE):
    """Yield ``(eqn, user source line)`` for every equation, nested ones included.

    A nested equation without a user frame of its own gets the line of the
    equation whose jaxpr holds it.
    """
    from jax._src import core as jax_core

    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        line = source_line(eqn, enclosing)
        yield eqn, line
        for sub in jax_core.jaxprs_in_params(eqn.params):
            yield from iter_equations(sub, line)


def check_supported(
    closed: Any,
    registry: Any,
    plugin_set: Any,
    enclosing: str | None = None,
    within: str = "a lowering's decomposition",
) -> None:
    """Raise one error listing every primitive (in every sub-jaxpr) without a lowering.

    ``enclosing`` is the user's line when ``closed`` is a lowering's own
    computation (a decomposition, a subgraph body, ``within`` says which): the
    error names that line first, then the line inside it.
    """
    missing: dict[str, tuple[Any, str]] = {}
    for eqn, line in iter_equations(closed, enclosing or UNKNOWN_SOURCE):
        name = eqn.primitive.name
        if touches_complex(eqn) and name in registry:  # lowered for real values: and complex?
            if registry.handles(name, complex=True):
                continue
            name = f"{name} (on complex values)"
        elif name in registry or registry.implementation(eqn.primitive) is not None:
            continue
        if name not in missing:
            if enclosing is not None and line != enclosing:
                line = f"{enclosing}, in {within} at {line}"
            missing[name] = (eqn, line)
    if not missing:
        return
    lines = [
        f"jax2onnx cannot convert this function: {len(missing)} primitive(s) have no lowering."
    ]
    plugins = tuple(getattr(plugin_set, "plugins", ()))
    for name, (eqn, line) in missing.items():
        avals = ", ".join(v.aval.str_short() for v in eqn.invars) or "no inputs"
        lines.append(f"  - {name!r} on ({avals}) at {line}")
        lines.append(f"    {_advice(eqn, plugins, registry)}")
    if plugin_set is not None:
        loaded = ", ".join(f"{p.name} {p.version}" for p in plugins) or "none"
        lines.append(f"Loaded plugins: {loaded}")
        for failure in plugin_set.failures:
            lines.append(f"Failed plugin: {failure.describe()}")
        idle = _installed_not_loaded(plugin_set)
        if idle:
            lines.append(
                f"Installed but not loaded (JAX2ONNX_PLUGINS / JAX2ONNX_DISABLE_PLUGINS): {idle}"
            )
    raise UnsupportedPrimitiveError("\n".join(lines))


def _advice(eqn: Any, plugins: tuple[Any, ...], registry: Any) -> str:
    name = eqn.primitive.name
    if name in registry:  # lowered for real values, not for complex ones
        return (
            "it is lowered for real values only: keep this operation on real values "
            "(jnp.real / jnp.imag), or add a rule with rules.lowering(..., values='complex') "
            "(see the plugin guide)"
        )
    write_one = (
        "write a lowering (see the plugin guide) and pass it with "
        "to_onnx(..., extra_rules=[rules]), or publish a jax2onnx plugin"
    )
    prefix = name.split(".", 1)[0] if "." in name else None
    owners = [p for p in plugins if p.name == prefix]
    library = None
    if not owners:
        library = library_of(eqn.primitive)
        owners = [p for p in plugins if p.rules is not None and library in p.rules.libraries]
    if owners:
        names = ", ".join(f"{p.distribution} (plugin {p.name!r})" for p in owners)
        return (
            f"{names} is installed but does not lower it yet; please report it, or add a "
            "lowering with to_onnx(..., extra_rules=[rules])"
        )
    if library is None:
        return f"no known plugin lowers it: {write_one}"
    what = "JAX's own primitives" if library == "jax" else f"primitives of {library!r}"
    return (
        f"no loaded plugin lowers {what}: install the jax2onnx plugin for them "
        f'(pip install "jax2onnx[all]" installs all of the project\'s), or {write_one}'
    )


def library_of(primitive: Any) -> str | None:
    """The top-level package that defines ``primitive`` (``"jax"``, ``"equinox"`` ...)."""
    for module_name in _JAX_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if any(value is primitive for value in vars(module).values()):
            return "jax"
    for module_name, module in list(sys.modules.items()):
        try:
            values = list(vars(module).values())
        except TypeError:
            continue
        if any(value is primitive for value in values):
            return module_name.split(".", 1)[0]
    return None


def _installed_not_loaded(plugin_set: Any) -> str:
    from jax2onnx.registration.hookspecs import ENTRY_POINT_GROUP

    loaded = {p.name for p in plugin_set.plugins} | {f.name for f in plugin_set.failures}
    idle = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in loaded:
            dist = ep.dist.name if ep.dist is not None else "?"
            idle.append(f"{ep.name} ({dist})")
    return ", ".join(sorted(set(idle)))
