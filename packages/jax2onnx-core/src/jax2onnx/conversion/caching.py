"""The keys a conversion's work has in JAX's caches, and ``at_conversion``.

Light on purpose (JAX only): plugin family modules import ``at_conversion`` from
:mod:`jax2onnx.plugin` when they load.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from typing import Any

import jax

# A JAX user context keeping our traces apart from the user's in JAX's caches: a
# ``jax.jit`` function traced while converting holds the interceptions' macro
# primitives; keyed by the interceptions in force, that cached jaxpr is never handed
# to the user's own calls (nor theirs to the converter). Made once, at import: JAX
# asks that user contexts are not created concurrently with other JAX calls.
#
# The key also names the conversion and how many new dimensions it has made so far
# (``new_dimension``): a jaxpr cached by one conversion holds its ``nonzero_0``, which
# is another dimension in the next conversion; and a jitted function that made a new
# dimension must make another on its next call (a size of its own), not have its
# trace, and so that call's size, reused.
JIT_KEY = jax.make_user_context(default_value=None)

# The key of what stand-ins compute from a module's concrete arrays while a conversion
# traces (:func:`at_conversion`): one per set of interceptions, shared by every conversion,
# so the small XLA programs of those eager computations compile once per process, not once
# per conversion (they make no new dimensions: their operands are concrete).
EAGER_KEY: contextvars.ContextVar[Any] = contextvars.ContextVar("jax2onnx_eager_key", default=None)


def at_conversion(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` evaluated now: its concrete results become initializers.

    For what a stand-in computes from a module's arrays (dtype promotion, layout
    changes, masks, normalised weights, position tables): JAX evaluates it eagerly
    (``jax.ensure_compile_time_eval``) with its own numbers. Inside a conversion the
    evaluation is keyed in JAX's caches apart from the user's but alike for every
    conversion, so a second conversion reuses what the first compiled. Operations on
    traced values are staged into the trace as usual; they must not depend on the
    data for their shapes (``jnp.nonzero`` without ``size``).

    Args:
        fn: the computation, a JAX function.
        *args: its positional arguments (a module's arrays).
        **kwargs: its keyword arguments.

    Returns:
        What ``fn`` returns: concrete arrays where the arguments are concrete.

    Example:
        ```python
        def linear_stand_in(module, x):  # a module's arrays are concrete while tracing
            kernel_t = at_conversion(jnp.transpose, module.kernel)  # an initializer, no node
            return linear_p.bind(x, kernel_t)
        ```
    """
    key = EAGER_KEY.get()
    with contextlib.ExitStack() as stack:
        stack.enter_context(jax.ensure_compile_time_eval())
        if key is not None:
            stack.enter_context(JIT_KEY(key))
        return fn(*args, **kwargs)
