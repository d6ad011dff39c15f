"""The converter: the steps of ``to_onnx``, one module each, data moving forward.

::

    specs.normalize_inputs   inputs -> ShapeDtypeStructs (symbolic dims), input names
    prepare.prepare          a module -> a pure function (the jax2onnx_prepare hook)
    tracing.trace            function -> ClosedJaxpr (interceptions, checked lowerings)
    lowering.lower           ClosedJaxpr -> onnx_ir.Model
    layout.adapt_nchw        channels-first graph inputs/outputs
    passes.optimize          graph clean-up, one pass per module
    serialize                (api.to_onnx) ModelProto, onnx_ir.Model or a file

:func:`convert` runs the steps up to the passes and returns the model with a
:class:`ConversionReport` (step timings, the ONNX ops each primitive emitted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from jax2onnx import layout, lowering, passes, prepare, specs, tracing
from jax2onnx._ir import ir

MIN_OPSET = 17
MAX_OPSET = 26
_IR_VERSIONS = {17: 8, 18: 8, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 11, 25: 12, 26: 13}


def ir_version_for(opset: int) -> int:
    """The oldest IR version that carries ``opset`` (what runtimes accept most widely)."""
    return _IR_VERSIONS[opset]


def check_opset(opset: Any) -> int:
    if isinstance(opset, bool) or not isinstance(opset, int):
        raise TypeError(f"opset must be an int, got {opset!r}")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset {opset} is not supported; choose {MIN_OPSET}..{MAX_OPSET}")
    return opset


@dataclasses.dataclass(frozen=True)
class Options:
    """The settings of one conversion (``to_onnx``'s arguments but the output ones)."""

    input_params: Mapping[str, Any] | None = None
    model_name: str = "jax_model"
    opset: int = 23
    enable_double_precision: bool = False
    input_names: Sequence[str] | None = None
    output_names: Sequence[str] | None = None
    inputs_as_nchw: Sequence[int | str] | None = None
    outputs_as_nchw: Sequence[int | str] | None = None
    record_primitive_calls_file: str | os.PathLike[str] | None = None


@dataclasses.dataclass(frozen=True)
class ConversionReport:
    """What one conversion did.

    Attributes:
        timings: seconds per step, in order (``plugins``, ``prepare``,
            ``trace``, ``lower``, ``passes``; ``to_onnx`` adds ``serialize``).
        emitted_ops: per primitive, the ONNX op types its rule emitted (the
            coverage table is built from this).
    """

    timings: Mapping[str, float]
    emitted_ops: Mapping[str, frozenset[str]]


@dataclasses.dataclass(frozen=True)
class ConversionResult:
    """The optimised ``onnx_ir.Model`` and the :class:`ConversionReport` of a conversion."""

    model: ir.Model
    report: ConversionReport


class _Clock:
    def __init__(self, timings: dict[str, float]) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.timings[step] = now - self.last
        self.last = now


def convert(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    options: Options,
    *,
    plugin_set: Any,
    registry: Any,
    timings: Mapping[str, float] = types.MappingProxyType({}),
) -> ConversionResult:
    """Run the steps from the user's inputs to the optimised model."""
    report_times = dict(timings)
    clock = _Clock(report_times)
    opset = check_opset(options.opset)
    double = options.enable_double_precision
    x64 = jax.enable_x64(True) if double else contextlib.nullcontext()
    with x64:
        config = prepare.PrepareConfig(
            input_params=options.input_params if isinstance(options.input_params, Mapping) else {},
            opset=opset,
            enable_double_precision=double,
        )
        target, _ = prepare.prepare(fn, plugin_set, config)
        clock.lap("prepare")
        input_specs = specs.normalize_inputs(
            inputs,
            options.input_params,
            double=double,
            input_names=options.input_names,
            arg_names=specs.positional_names(target),
        )
        closed, out_shapes = tracing.trace(target, input_specs, registry, plugin_set)
        if options.record_primitive_calls_file is not None:
            tracing.record_calls(closed, options.record_primitive_calls_file)
        clock.lap("trace")
        in_names = [*input_specs.names, *(k for k, _ in input_specs.params)]
        out_names = specs.output_names(out_shapes, options.output_names, in_names)
        model, emitted = lowering.lower(
            closed,
            list(zip(in_names, input_specs.all_specs)),
            out_names,
            registry=registry,
            plugin_set=plugin_set,
            opset=opset,
            model_name=options.model_name,
            ir_version=ir_version_for(opset),
            producer_version=_version(),
        )
    layout.adapt_nchw(model, options.inputs_as_nchw, options.outputs_as_nchw)
    clock.lap("lower")
    passes.optimize(model)
    clock.lap("passes")
    report = ConversionReport(
        types.MappingProxyType(report_times),
        types.MappingProxyType({k: frozenset(v) for k, v in emitted.items()}),
    )
    return ConversionResult(model, report)


def _version() -> str:
    from jax2onnx import __version__

    return __version__
