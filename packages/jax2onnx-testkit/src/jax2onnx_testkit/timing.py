"""Where a check's seconds go: per-phase wall time, JAX compile time and the converter's steps.

`check_case` takes a `PhaseClock` and times its phases with it: ``case``
(building the case's function or model), ``convert`` (``to_onnx``, split
into the converter's own steps ``convert.plugins`` ... ``convert.serialize``
from its debug log record), ``checker``, ``jax`` (the reference: preparing
it and running it at every size), ``ort_session`` and ``ort_run``. With a
`CompileMeter` each phase also gets ``<phase>.compile``: the seconds JAX
spent lowering jaxprs to MLIR and compiling them with XLA inside it (eager
dispatch compiles one program per primitive, shape and dtype it has not
seen in this process; ``jax.jit`` one per function and input shapes).

The testkit's pytest plugin makes one clock per test with
``--jax2onnx-timings=FILE`` and appends its figures to ``FILE`` as one JSON
line; ``benchmarks/suite_durations.py`` turns those lines into the table of
the testing page.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

# the events JAX records around making an XLA executable (jax._src.dispatch); its
# jaxpr_trace event is left out: it also fires for a jit nested in another trace
# (in make_jaxpr, or in an outer jit) and would count those seconds twice
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class CompileMeter:
    """Seconds JAX spent lowering and compiling programs since `install`, summed over this process.

    JAX's monitoring listeners are process-wide and cannot be scoped, so a
    meter is meant to be installed once, by the pytest plugin, for the whole
    timed run; `uninstall` removes its listener.
    """

    def __init__(self) -> None:
        self.seconds = 0.0

    def _listen(self, event: str, duration: float, **_: object) -> None:
        if event in _COMPILE_EVENTS:
            self.seconds += duration

    def install(self) -> None:
        import jax

        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def uninstall(self) -> None:
        from jax._src import monitoring

        monitoring.unregister_event_duration_listener(self._listen)


class _StepTimings(logging.Handler):
    """Catches the ``jax2onnx_timings`` that ``to_onnx`` logs at debug level."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.steps: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        for step, seconds in getattr(record, "jax2onnx_timings", {}).items():
            self.steps[step] = self.steps.get(step, 0.0) + seconds


class PhaseClock:
    """Accumulates seconds per phase into `times` (a phase timed twice adds up).

    Args:
        meter: a `CompileMeter` (installed), to split out JAX compile time.
    """

    def __init__(self, meter: CompileMeter | None = None) -> None:
        self.times: dict[str, float] = {}
        self._meter = meter

    def _add(self, key: str, seconds: float) -> None:
        self.times[key] = self.times.get(key, 0.0) + seconds

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        logger = logging.getLogger("jax2onnx")
        steps = _StepTimings() if phase == "convert" else None
        level = logger.level
        if steps is not None:
            logger.addHandler(steps)
            logger.setLevel(logging.DEBUG)
        compiled = self._meter.seconds if self._meter else 0.0
        start = time.perf_counter()
        try:
            yield
        finally:
            self._add(phase, time.perf_counter() - start)
            if self._meter:
                self._add(f"{phase}.compile", self._meter.seconds - compiled)
            if steps is not None:
                logger.removeHandler(steps)
                logger.setLevel(level)
                for step, seconds in steps.steps.items():
                    self._add(f"convert.{step}", seconds)


@contextlib.contextmanager
def no_clock(phase: str) -> Iterator[None]:
    """The clock `check_case` uses when nobody asked for timings."""
    yield
