"""Settings for every process of the suite: the pytest workers and the processes they start.

JAX's reference outputs are compiled by XLA, and compiling is most of the
suite's time (docs/testing.md, "Where the time goes"). Two flags of XLA's
CPU backend make those compiles much faster: optimisation level 0 (the same
operations without LLVM's optimisations) and the classic elemental emitters
for fusions in place of the newer MLIR ones. Results differ from XLA's
defaults in the last bits at most (where LLVM contracts a multiply and an
add, or the two emitters approximate a transcendental differently), far
inside the suite's tolerances, so the references stay JAX's numbers. A flag
that ``XLA_FLAGS`` already sets is kept: ``XLA_FLAGS="--xla_backend_optimization_level=3
--xla_cpu_use_fusion_emitters=true"`` checks against XLA's defaults. The
variable is read when XLA's backend starts, so it is set here, before any
test runs JAX; the processes the tests start (docs pages, the site build)
inherit it. Both flags exist in every jaxlib the core's pins admit (an
unknown flag stops XLA at start-up).
"""

import os

_FAST_COMPILES = {
    "--xla_backend_optimization_level": "0",
    "--xla_cpu_use_fusion_emitters": "false",
}
_flags = os.environ.get("XLA_FLAGS", "")
_missing = [f"{flag}={value}" for flag, value in _FAST_COMPILES.items() if flag not in _flags]
if _missing:
    os.environ["XLA_FLAGS"] = " ".join([_flags, *_missing]).strip()
