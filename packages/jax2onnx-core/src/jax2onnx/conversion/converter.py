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
import numbers
import os
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jax2onnx import passes
from jax2onnx.conversion import layout, lowering, specs, tracing
from jax2onnx.registration import prepare
from jax2onnx.values.ir import ir

MIN_OPSET = 13
MAX_OPSET = 26
NORMALIZATION_MODES = ("auto", "prefer_native", "force_decomposed")
_IR_VERSIONS = {
    13: 7,
    14: 7,
    15: 8,
    16: 8,
    17: 8,
    18: 8,
    19: 9,
    20: 9,
    21: 10,
    22: 10,
    23: 11,
    24: 11,
    25: 12,
    26: 13,
}


def ir_version_for(opset: int) -> int:
    """The oldest IR version that carries ``opset`` (what runtimes accept most widely)."""
    return _IR_VERSIONS[opset]


def check_opset(opset: Any) -> int:
    """``opset`` as an int in ``MIN_OPSET..MAX_OPSET``; TypeError/ValueError naming it otherwise."""
    if isinstance(opset, (bool, np.bool_)) or not isinstance(opset, numbers.Integral):
        raise TypeError(f"opset must be an int, got {opset!r} ({type(opset).__name__})")
    opset = int(opset)
    if opset < MIN_OPSET:
        raise ValueError(
            f"opset {opset} is not supported; choose {MIN_OPSET}..{MAX_OPSET}: jax2onnx "
            f"writes opset {MIN_OPSET} or newer (ONNX 1.8, 2020), which every current runtime "
            f"reads; pass opset={MIN_OPSET}"
        )
    if opset > MAX_OPSET:
        raise ValueError(f"opset {opset} is not supported; choose {MIN_OPSET}..{MAX_OPSET}")
    return opset


def check_choice(argument: str, value: Any, options: Sequence[str]) -> str:
    """``value`` lower-cased and trimmed, one of ``options``; TypeError/ValueError naming it."""
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a string, one of {list(options)}, got {value!r}")
    normalised = value.strip().lower()
    if normalised not in options:
        raise ValueError(f"{argument} must be one of {list(options)}, got {value!r}")
    return normalised


def _check_positions(argument: str, value: Any) -> tuple[Any, ...] | None:
    what = f"graph {argument.split('_')[0]} (positions or names)"
    listed = specs.check_list(argument, value, what)
    return None if listed is None else tuple(listed)


def _check_record_file(path: Any) -> Any:
    if path is None:
        return None
    try:
        text = os.fspath(path)
    except TypeError:
        raise TypeError(
            f"record_primitive_calls_file must be a str or os.PathLike, got {type(path).__name__}"
        ) from None
    if not text or "\0" in os.fsdecode(text):
        raise ValueError(f"record_primitive_calls_file {path!r} is not a file path")
    if os.path.isdir(text):
        raise ValueError(f"record_primitive_calls_file {path!r} is a directory; give a file")
    return path


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
    normalization_mode: str = "auto"
    source_metadata: bool = True
    native_half_precision: bool = False

    def __post_init__(self) -> None:
        """Check every setting; errors are TypeError/ValueError naming the argument."""
        if not isinstance(self.model_name, str) or not self.model_name:
            raise TypeError(f"model_name must be a non-empty string, got {self.model_name!r}")
        double = self.enable_double_precision
        if not isinstance(double, (bool, np.bool_)):
            raise TypeError(f"enable_double_precision must be a bool, got {double!r}")
        for flag in ("source_metadata", "native_half_precision"):
            if not isinstance(getattr(self, flag), (bool, np.bool_)):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        specs.check_params(self.input_params)
        checked = {
            "opset": check_opset(self.opset),
            "enable_double_precision": bool(double),
            "source_metadata": bool(self.source_metadata),
            "native_half_precision": bool(self.native_half_precision),
            "input_names": specs.check_names("input_names", self.input_names),
            "output_names": specs.check_names("output_names", self.output_names),
            "inputs_as_nchw": _check_positions("inputs_as_nchw", self.inputs_as_nchw),
            "outputs_as_nchw": _check_positions("outputs_as_nchw", self.outputs_as_nchw),
            "record_primitive_calls_file": _check_record_file(self.record_primitive_calls_file),
            "normalization_mode": check_choice(
                "normalization_mode", self.normalization_mode, NORMALIZATION_MODES
            ),
        }
        for name, value in checked.items():
            if value is not None and name.endswith("_names"):
                value = tuple(value)
            object.__setattr__(self, name, value)


@dataclasses.dataclass(frozen=True)
class ConversionReport:
    """What one conversion did.

    Attributes:
        timings: seconds per step, in order (``plugins``, ``prepare``,
            ``trace``, ``lower``, ``passes``; ``to_onnx`` adds ``serialize``).
        emitted_ops: per primitive, the ONNX op types its rule emitted (the
            coverage table is built from this).
        inlined: the primitives no plugin lowers that were converted through
            their own JAX implementation (a library's ``def_impl``).
    """

    timings: Mapping[str, float]
    emitted_ops: Mapping[str, frozenset[str]]
    inlined: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class ConversionResult:
    """What `jax2onnx.convert` returns.

    Attributes:
        model: the optimised ``onnx_ir.Model`` (``to_onnx`` serialises this).
        report: the `ConversionReport` of the conversion.
        jaxpr: the ``ClosedJaxpr`` that was lowered: its inputs are the
            leaves of ``inputs`` in order, then the ``input_params`` inputs.
    """

    model: ir.Model
    report: ConversionReport
    jaxpr: Any = None


@contextlib.contextmanager
def step(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Time one step; an exception leaving it gets a note naming the step.

    The exception itself (type and message) is unchanged: the user's own
    errors stay theirs, and ``except`` clauses keep working.
    """
    start = time.perf_counter()
    try:
        yield
    except Exception as err:
        err.add_note(f"(raised in jax2onnx's '{name}' step)")
        raise
    finally:
        timings[name] = time.perf_counter() - start


def convert(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    options: Options,
    *,
    plugin_set: Any,
    registry: Any,
    timings: Mapping[str, float] = types.MappingProxyType({}),
    recorder: Any = None,
) -> ConversionResult:
    """Run the steps from the user's inputs to the optimised model.

    A :class:`jax2onnx.values.provenance.Recorder` given as ``recorder`` collects
    where each user equation's values went (what ``verify`` reads).
    """
    report_times = dict(timings)
    opset = check_opset(options.opset)
    double = options.enable_double_precision
    x64 = jax.enable_x64(True) if double else contextlib.nullcontext()
    with x64:
        with step("prepare", report_times):
            config = prepare.PrepareConfig(
                input_params=(
                    options.input_params if isinstance(options.input_params, Mapping) else {}
                ),
                opset=opset,
                enable_double_precision=double,
                normalization_mode=options.normalization_mode,
            )
            target, _ = prepare.prepare(fn, plugin_set, config)
        # after the prepare hook: a plugin that recognises the object names its misuse
        # (an Equinox model passed without its state) before this generic check does
        specs.check_call(fn, len(inputs), list(options.input_params or ()))
        with step("trace", report_times):
            input_specs = specs.normalize_inputs(
                inputs,
                options.input_params,
                double=double,
                input_names=options.input_names,
                arg_names=specs.positional_names(target),
            )
            closed, out_shapes = tracing.trace(
                target,
                input_specs,
                registry,
                plugin_set,
                described=specs.describe_fn(fn),
                record=options.record_primitive_calls_file,
            )
        with step("lower", report_times):
            in_names = [*input_specs.names, *(k for k, _ in input_specs.params)]
            out_names = specs.output_names(out_shapes, options.output_names, in_names)
            model, emitted, inlined = lowering.lower(
                closed,
                list(zip(in_names, input_specs.all_specs)),
                out_names,
                registry=registry,
                plugin_set=plugin_set,
                opset=opset,
                normalization_mode=options.normalization_mode,
                model_name=options.model_name,
                ir_version=ir_version_for(opset),
                producer_version=_version(),
                metadata=options.source_metadata,
                recorder=recorder,
            )
            layout.adapt_nchw(
                model,
                options.inputs_as_nchw,
                options.outputs_as_nchw,
                _complex_positions(s.dtype for s in input_specs.all_specs),
                _complex_positions(v.aval.dtype for v in closed.jaxpr.outvars),
            )
    with step("passes", report_times):
        passes.optimize(
            model,
            normalization_mode=options.normalization_mode,
            native_half_precision=options.native_half_precision,
        )
    report = ConversionReport(
        types.MappingProxyType(report_times),
        types.MappingProxyType({k: frozenset(v) for k, v in emitted.items()}),
        inlined,
    )
    return ConversionResult(model, report, closed)


def _complex_positions(dtypes: Any) -> frozenset[int]:
    from jax2onnx.values.keys import is_complex

    return frozenset(i for i, d in enumerate(dtypes) if is_complex(d))


def _version() -> str:
    from jax2onnx.values.version import __version__

    return __version__
