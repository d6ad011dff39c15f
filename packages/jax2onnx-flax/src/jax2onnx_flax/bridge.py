"""``nnx.bridge.ToNNX`` called while ``to_onnx`` traces: a pure ``apply``, no RNG drawn.

``ToNNX.__call__`` draws one key per RNG stream before it applies the Linen
module. Inside a trace that advances the module's ``RngCount`` from the
wrong trace level (``TraceContextError``), and an exported model has no use
for the key: in inference no Linen layer needs one. While converting, the
call is replaced by the same ``apply`` over the module's variables (Flax's
own conversion, ``nnx.bridge.variables.nnx_attrs_to_linen_vars``) without
RNGs and without mutable collections, so the user's module is left as it
was. Calls that ask for more (``rngs=``, ``mutable=``, a module not yet
initialised, a call from inside a bridged Linen scope) run Flax's method.

A module never initialised (``nnx.bridge.lazy_init`` not called: it holds no
variables) fails in Flax with ``ScopeCollectionNotFound`` as soon as a layer
reads a parameter; the conversion then raises :class:`jax2onnx.plugin.UsageError`
saying to call ``nnx.bridge.lazy_init(module, x)`` first. (A Linen module
without variables, such as a lone ``Dropout``, needs no initialisation and
converts as it is.)

This interception binds no primitive: the Linen layers inside become
primitives through their own stand-ins (:mod:`jax2onnx_flax.linen`).
"""

from __future__ import annotations

import functools

from jax2onnx.plugin import Family, UsageError

family = Family("flax")
register = family.register

LINEN = ()


def _own_attributes(module):
    return {
        k: v
        for k, v in vars(module).items()
        if not k.startswith("to_nnx__") and not k.startswith("_pytree__")
    }


def _initializing(module):
    """Whether ``module`` runs under ``nnx.bridge.lazy_init`` (Flax's ``init`` then)."""
    state = getattr(module, "_pytree__state", None)
    return bool(getattr(state, "initializing", False))


def _uninitialised(module):
    kind = type(module.to_nnx__module).__name__
    return UsageError(
        f"nnx.bridge.ToNNX({kind}) has not been initialised: it holds none of the Linen "
        f"module's variables yet (Flax creates them on a first call under lazy_init). "
        f"Call nnx.bridge.lazy_init(module, x) before to_onnx, with module the model you "
        f"convert (the ToNNX itself or the NNX model holding it) and x a sample input, "
        f"then load trained weights into it (nnx.update) if you have them."
    )


def _to_nnx_binder(original):
    from flax import errors
    from flax.nnx import bridge
    from flax.nnx.bridge import variables as bridge_variables

    @functools.wraps(original)
    def call(self, *args, rngs=None, method=None, mutable=None, **kwargs):
        attributes = _own_attributes(self)
        plain = (
            rngs is None
            and mutable in (None, False)
            and attributes
            and bridge.current_module() is None
        )
        if not plain:
            try:
                return original(self, *args, rngs=rngs, method=method, mutable=mutable, **kwargs)
            except (errors.ScopeCollectionNotFound, errors.ScopeParamNotFoundError) as err:
                if attributes or _initializing(self):
                    raise
                raise _uninitialised(self) from err
        variables = bridge_variables.nnx_attrs_to_linen_vars(attributes)
        return self.to_nnx__module.apply(variables, *args, method=method, **kwargs)

    return call


family.intercept("flax.nnx.bridge.ToNNX.__call__", None, binder=_to_nnx_binder)
