"""Settings for every process of the suite: the pytest workers and the processes they start.

JAX's reference outputs are compiled by XLA, and compiling is most of the
suite's time (docs/testing.md, "Where the time goes"). XLA's CPU backend at
optimisation level 0 compiles about twice as fast. It emits the same
operations without LLVM's optimisations; results differ from optimised code
in the last bits at most (where LLVM contracts a multiply and an add), far
inside the suite's tolerances, so the references stay JAX's numbers. An
``XLA_FLAGS`` that already sets the level is kept (set
``--xla_backend_optimization_level=3`` to check against fully optimised
code). The variable is read when XLA's backend starts, so it is set here,
before any test runs JAX; the docs pages' processes inherit it.
"""

import os

_LEVEL = "--xla_backend_optimization_level"
if _LEVEL not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_LEVEL}=0".strip()
