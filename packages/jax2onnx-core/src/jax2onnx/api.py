"""The public entry points: ``to_onnx``, ``convert`` and ``traced_callable``.

``allclose`` and ``allclose_onnxruntime_web`` are in :mod:`jax2onnx.validation`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from jax2onnx.rules import Rules

if TYPE_CHECKING:
    from jax2onnx.converter import ConversionResult

logger = logging.getLogger("jax2onnx")

ReturnMode = Literal["proto", "ir", "file"]
ExportMode = Literal["standard", "web"]
NormalizationMode = Literal["auto", "prefer_native", "force_decomposed"]
_RETURN_MODES = ("proto", "ir", "file")
_EXPORT_MODES = ("standard", "web")


def _plugins() -> Any:
    from jax2onnx import plugins

    return plugins()


def _extra(extra_rules: Sequence[Rules] | Rules | None) -> list[Rules]:
    if isinstance(extra_rules, Rules):
        extra_rules = [extra_rules]
    if extra_rules is not None and not isinstance(extra_rules, Iterable):
        raise TypeError(
            f"extra_rules must be a jax2onnx.plugin.Rules or a list of them, got {extra_rules!r}"
        )
    extra = list(extra_rules or ())
    for item in extra:
        if not isinstance(item, Rules):
            raise TypeError(f"extra_rules entries must be jax2onnx.plugin.Rules, got {item!r}")
    return extra


def convert(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    input_params: Mapping[str, Any] | None = None,
    model_name: str = "jax_model",
    opset: int = 23,
    *,
    enable_double_precision: bool = False,
    record_primitive_calls_file: str | os.PathLike[str] | None = None,
    inputs_as_nchw: Sequence[int | str] | None = None,
    outputs_as_nchw: Sequence[int | str] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    extra_rules: Sequence[Rules] | Rules | None = None,
    normalization_mode: NormalizationMode = "auto",
) -> ConversionResult:
    """Convert like :func:`to_onnx`, returning the ``onnx_ir.Model`` and a report.

    Takes :func:`to_onnx`'s arguments but the output ones. The result's
    ``model`` is the optimised ``onnx_ir.Model``; its ``report`` holds the
    seconds each step took and the ONNX op types each primitive's rule
    emitted (what ``jax2onnx coverage`` and the testkit read).
    """
    from jax2onnx import converter, specs

    extra = _extra(extra_rules)
    start = time.perf_counter()
    plugin_set = _plugins()
    registry = plugin_set.registry(extra)
    options = converter.Options(
        input_params=input_params,
        model_name=model_name,
        opset=opset,
        enable_double_precision=enable_double_precision,
        input_names=input_names,
        output_names=output_names,
        inputs_as_nchw=inputs_as_nchw,
        outputs_as_nchw=outputs_as_nchw,
        record_primitive_calls_file=record_primitive_calls_file,
        normalization_mode=normalization_mode,
    )
    specs.check_inputs(inputs)
    specs.check_call(fn, len(inputs), list(input_params or ()))
    return converter.convert(
        fn,
        inputs,
        options,
        plugin_set=plugin_set,
        registry=registry,
        timings={"plugins": time.perf_counter() - start},
    )


def to_onnx(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    input_params: Mapping[str, Any] | None = None,
    model_name: str = "jax_model",
    opset: int = 23,
    *,
    enable_double_precision: bool = False,
    record_primitive_calls_file: str | os.PathLike[str] | None = None,
    return_mode: ReturnMode = "proto",
    output_path: str | os.PathLike[str] | None = None,
    inputs_as_nchw: Sequence[int | str] | None = None,
    outputs_as_nchw: Sequence[int | str] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    export_mode: ExportMode = "standard",
    normalization_mode: NormalizationMode = "auto",
    extra_rules: Sequence[Rules] | Rules | None = None,
    external_data: bool | None = None,
) -> Any:
    """Convert a JAX callable (or a module a plugin understands) to ONNX.

    Args:
        fn: the function or model to convert.
        inputs: one entry per positional input: a shape tuple of ints and
            strings (``("B", 30)``; a string is a symbolic dimension and the
            same string in two inputs is the same dimension), an array, or a
            ``jax.ShapeDtypeStruct`` (bool, integer, float or complex), or a
            pytree (dict, tuple, dataclass) of those.
        input_params: keyword arguments of ``fn`` that become scalar graph
            inputs named after their keys.
        model_name: the ONNX graph's name.
        opset: the ONNX opset to target (13 to 26).
        enable_double_precision: trace with 64-bit types and keep float64.
        record_primitive_calls_file: write one line per traced primitive.
        return_mode: ``"proto"`` (``onnx.ModelProto``), ``"ir"``
            (``onnx_ir.Model``) or ``"file"`` (write ``output_path``).
        output_path: where to write the model with ``return_mode="file"``.
        inputs_as_nchw, outputs_as_nchw: graph inputs/outputs (by position or
            name) whose external layout is channels-first (N, C, spatial...)
            while ``fn`` works channels-last (N, spatial..., C); the
            transposes are merged with neighbouring ones where possible.
        input_names, output_names: names of the graph inputs and outputs, by
            position; the rest default to ``in_<i>`` and ``out_<i>``.
        export_mode: ``"standard"`` or ``"web"``; with ``"file"``, ``"web"``
            writes one self-contained file for onnxruntime-web (never external
            data; a model whose weights exceed protobuf's 2 GiB is refused).
            ``"proto"`` and ``"ir"`` results are the same in both modes.
        normalization_mode: how LayerNorm, GroupNorm and RMSNorm layers (and
            ``jax.nn.standardize``) export: ``"prefer_native"`` emits
            ``LayerNormalization`` (opset >= 17), ``GroupNormalization``
            (>= 21) and ``RMSNormalization`` (>= 23) wherever the op can
            express the layer; ``"force_decomposed"`` always emits the
            layer's own arithmetic (the graph JAX computes, op for op);
            ``"auto"`` (default) lets each rule choose the form its cases show
            matches JAX at their tolerances -- today that is the native op
            wherever ``"prefer_native"`` uses it (see docs/numerics.md).
        extra_rules: ``Rules`` to add for this call only.
        external_data: with ``"file"``, force weights into an external data
            file (``True``) or inline (``False``); default: only above 2 GiB.

    Returns:
        The model in the form ``return_mode`` asks for (the path for ``"file"``).

    Raises:
        TypeError: an argument of the wrong type, e.g. a shape entry that is
            not an int or a string, an array of strings or objects, an
            ``input_params`` value that is not a number, bool or array, a
            non-callable ``fn``, a non-string ``return_mode``. The message
            names the argument (``inputs[1], axis 0``, ``input_params['scale']``,
            ``opset``, ``output_path``, ``input_names[0]`` ...).
        ValueError: a value out of range or inconsistent with the others: a
            negative or non-int64 dimension, a malformed symbolic dimension,
            an opset outside 13..26, an unknown ``return_mode``,
            ``export_mode`` or ``normalization_mode``, ``"file"`` without an
            ``output_path`` (an ``output_path`` without ``"file"`` is ignored,
            as in jax2onnx 0.17), ``export_mode="web"`` with
            ``external_data=True``, an ``output_path`` that is a directory,
            more ``inputs`` than ``fn`` takes, an ``input_params`` key ``fn``
            has no parameter for, too many or repeated
            ``input_names``/``output_names``. The message names the argument.
        jax2onnx.plugin.Jax2OnnxError: the conversion itself failed:
            ``UnsupportedPrimitiveError`` (no lowering for a primitive),
            ``LoweringError`` (a lowering rule failed) and the other
            subclasses.
        Exception: whatever ``fn`` raises while it is traced propagates
            unchanged (it is the caller's), as do JAX's errors about it (e.g.
            ``TypeError`` for ``x * y`` on shapes that do not broadcast) and
            ``OSError`` from writing the file. A failed call leaves no file
            at ``output_path`` (nor ``output_path + ".data"``).
    """
    from jax2onnx import serialize
    from jax2onnx.converter import step

    mode = _check_output(return_mode, output_path, external_data)
    web = _check_export_mode(export_mode, external_data)
    result = convert(
        fn,
        inputs,
        input_params,
        model_name,
        opset,
        enable_double_precision=enable_double_precision,
        record_primitive_calls_file=record_primitive_calls_file,
        inputs_as_nchw=inputs_as_nchw,
        outputs_as_nchw=outputs_as_nchw,
        input_names=input_names,
        output_names=output_names,
        extra_rules=extra_rules,
        normalization_mode=normalization_mode,
    )
    timings = dict(result.report.timings)
    with step("serialize", timings):
        if mode == "ir":
            output = result.model
        elif mode == "file":
            if web:
                serialize.check_single_file(result.model, "export_mode='web'")
            output = serialize.save(
                result.model, output_path, external_data=False if web else external_data
            )
        else:
            output = serialize.to_proto(result.model)
    if logger.isEnabledFor(logging.DEBUG):
        steps = ", ".join(f"{step} {seconds:.3f} s" for step, seconds in timings.items())
        logger.debug("converted %r: %s", model_name, steps, extra={"jax2onnx_timings": timings})
    return output


def _check_output(return_mode: Any, output_path: Any, external_data: Any) -> str:
    """The normalised ``return_mode``, after checking it against the output arguments."""
    from jax2onnx.converter import check_choice

    mode = check_choice("return_mode", return_mode, _RETURN_MODES)
    if external_data is not None and not isinstance(external_data, (bool, np.bool_)):
        raise TypeError(f"external_data must be True, False or None, got {external_data!r}")
    if mode != "file":
        return mode  # output_path and external_data are ignored, as jax2onnx 0.17 does
    if output_path is None:
        raise ValueError("return_mode='file' needs output_path, the file to write")
    _check_output_path(output_path)
    return mode


def _check_export_mode(export_mode: Any, external_data: Any) -> bool:
    """True for ``export_mode="web"``, after checking it against ``external_data``."""
    from jax2onnx.converter import check_choice

    mode = check_choice("export_mode", export_mode, _EXPORT_MODES)
    if mode == "web" and external_data:
        raise ValueError(
            "export_mode='web' writes one self-contained file; it cannot take "
            "external_data=True (onnxruntime-web would need the .data file fetched separately)"
        )
    return mode == "web"


def _check_output_path(output_path: Any) -> None:
    """``output_path`` names a file that can be created (its directories may be missing)."""
    try:
        path = os.fspath(output_path)
    except TypeError:
        raise TypeError(
            f"output_path must be a str or os.PathLike, got {type(output_path).__name__}"
        ) from None
    if not isinstance(path, str):
        raise TypeError(f"output_path must be a str path, got {type(path).__name__} {path!r}")
    if not path or "\0" in path:
        raise ValueError(f"output_path {output_path!r} is not a file path")
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        raise ValueError(f"output_path {path!r} is a directory; give the file to write")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"output_path {path!r}: {parent!r} exists and is not a directory")


def traced_callable(
    fn: Any, input_params: Mapping[str, Any] | None = None, opset: int = 23
) -> Callable[..., Any]:
    """The callable ``to_onnx`` traces for ``fn``: what the exported model computes.

    For a plain function that is ``fn``; for an object a plugin prepares (an
    ``nnx.Module`` or an ``eqx.Module``) it is the pure function the plugin
    makes, e.g. an inference-mode copy of the module. Compare an exported
    model against this, not against the training-mode module.

    A call that JAX cannot trace because a size depends on the data
    (``jnp.nonzero(x)``, ``x[mask]``, ``jnp.unique(x)`` inside ``jax.jit``,
    ``lax.scan`` or ``lax.cond``, which ``to_onnx`` converts with a dynamic
    dimension) runs again op by op under ``jax.disable_jit()``: JAX's own
    numbers, computed on the concrete arrays.
    """
    import functools

    import jax

    from jax2onnx.prepare import PrepareConfig

    config = PrepareConfig(input_params=dict(input_params or {}), opset=opset)
    prepared = _plugins().prepare(fn, config)
    target = prepared.fn if prepared is not None else fn
    data_dependent = (jax.errors.ConcretizationTypeError, jax.errors.NonConcreteBooleanIndexError)

    @functools.wraps(target)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return target(*args, **kwargs)
        except data_dependent:
            with jax.disable_jit():
                return target(*args, **kwargs)

    return call
