"""The public entry points: ``to_onnx``, ``convert`` and ``traced_callable``.

``allclose`` and ``allclose_onnxruntime_web`` are in :mod:`jax2onnx.checking.validation`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from jax2onnx.registration.rules import Rules

if TYPE_CHECKING:
    from jax2onnx.conversion.converter import ConversionResult

logger = logging.getLogger("jax2onnx")

ReturnMode = Literal["proto", "ir", "file"]
ExportMode = Literal["standard", "web"]
NormalizationMode = Literal["auto", "prefer_native", "force_decomposed"]
_RETURN_MODES = ("proto", "ir", "file")
_EXPORT_MODES = ("standard", "web")


def _plugins() -> Any:
    from jax2onnx.frontend.loading import plugins

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
    source_metadata: bool = True,
    native_half_precision: bool = False,
) -> ConversionResult:
    """Convert like `to_onnx`, returning the ``onnx_ir.Model`` and a report.

    Takes `to_onnx`'s arguments, with the same meanings, but the output ones
    (``return_mode``, ``output_path``, ``export_mode``, ``external_data``):
    nothing is serialised or written.

    Returns:
        A ``ConversionResult``: ``model`` is the optimised ``onnx_ir.Model``;
            ``report.timings`` holds the seconds each step took (``plugins``,
            ``prepare``, ``trace``, ``lower``, ``passes``) and
            ``report.emitted_ops`` the ONNX op types each primitive's rule
            emitted (what ``jax2onnx coverage`` reads).

    Raises:
        TypeError: as `to_onnx`.
        ValueError: as `to_onnx`.
        jax2onnx.plugin.Jax2OnnxError: as `to_onnx`.

    Example:
        ```python
        import jax.numpy as jnp
        from jax2onnx import convert

        result = convert(lambda x: jnp.sin(x) * 2, [("B", 4)])
        print(result.report.emitted_ops)  # {'sin': frozenset({'Sin'}), 'mul': ...}
        ```
    """
    from jax2onnx.conversion import converter, specs

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
        source_metadata=source_metadata,
        native_half_precision=native_half_precision,
    )
    specs.check_inputs(inputs)  # fn's signature is checked after the prepare hook
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
    source_metadata: bool = True,
    native_half_precision: bool = False,
) -> Any:
    """Convert a JAX function, or a model a plugin understands, to ONNX.

    The arguments and their meanings are those of jax2onnx 0.17's ``to_onnx``;
    ``extra_rules``, ``external_data``, ``source_metadata`` and ``native_half_precision``
    are new. Equal arguments give a
    byte-identical model: names and node order are deterministic.

    Args:
        fn: what to convert: a function of arrays, or an object an installed
            plugin prepares into one (an ``nnx.Module``, an ``eqx.Module``, a
            Linen module bound with its variables ...). Its first
            ``len(inputs)`` positional parameters become graph inputs.
        inputs: one entry per positional input of ``fn``: a shape tuple of
            ints and strings (float32, or float64 with
            ``enable_double_precision``), an array (its shape and dtype), a
            ``jax.ShapeDtypeStruct`` (bool, integer, float or complex), or a
            pytree (dict, tuple, registered dataclass) of those. A string is
            a symbolic dimension shared by all inputs (``"B"`` in two inputs
            is one dimension) and may be an expression (``"2*B"``).
        input_params: keyword arguments of ``fn`` that stay inputs of the
            exported graph, named after their keys; the values (bool, int,
            float or array) give their dtype and shape. Use them with
            ``lax.cond`` or ``jnp.where``. A scalar bool parameter (at most
            four) may also drive a Python ``if`` (Flax's ``deterministic``,
            Equinox's ``inference``): ``fn`` is traced once per value and an
            ``If`` node picks the branch at run time, so both values must
            give outputs of one shape.
        model_name: the name of the ONNX graph.
        opset: the ONNX opset to target, 13 to 26. Where an op does not exist
            at the target opset, its lowering writes the computation with
            older ops.
        enable_double_precision: trace with 64-bit types (``jax.enable_x64``),
            so float64 stays float64 in the model; otherwise 64-bit values
            become 32-bit, as in JAX's default mode.
        record_primitive_calls_file: a file to write one line per traced
            primitive to (name, input and output avals, params, source
            line), nested jaxprs included; for writing test cases. It is
            written when the conversion fails too, with the primitives
            traced before the error (all of them when tracing finished).
        return_mode: ``"proto"`` returns an ``onnx.ModelProto``, ``"ir"`` an
            ``onnx_ir.Model``, ``"file"`` writes the model to ``output_path``
            (atomically) and returns the path.
        output_path: the file to write with ``return_mode="file"``; missing
            directories are created. Ignored with the other modes.
        inputs_as_nchw: graph inputs (positions or names) that the model
            takes channels-first, ``(N, C, spatial...)``, while ``fn`` takes
            them channels-last, ``(N, spatial..., C)``. The added Transpose
            merges with a neighbouring one where it can, so a ``fn`` that
            transposes to NCHW itself ends up with none.
        outputs_as_nchw: graph outputs (positions or names) that the model
            gives channels-first while ``fn`` returns them channels-last.
        input_names: names of the graph inputs, by position; the rest are
            ``in_<i>``. A pytree input becomes one graph input per leaf,
            named by its key path under the input's name (``obs.joint_pos``;
            the name is ``input_names[i]``, else ``fn``'s parameter name).
            ``input_params`` inputs keep their keys as names.
        output_names: names of the graph outputs, by position; the rest are
            ``out_<i>``. A dict or dataclass output is named by key path
            (``logits``, ``value.0``).
        export_mode: ``"standard"`` or ``"web"``. With ``return_mode="file"``,
            ``"web"`` writes one self-contained file for onnxruntime-web:
            never external data, and a model whose weights exceed
            protobuf's 2 GiB is refused. ``"proto"`` and ``"ir"`` results
            are the same in both modes.
        normalization_mode: how LayerNorm, GroupNorm and RMSNorm layers (and
            ``jax.nn.standardize``) export. ``"prefer_native"``: the ONNX op
            (``LayerNormalization`` from opset 17, ``GroupNormalization``
            from 21, ``RMSNormalization`` from 23) wherever it can express
            the layer; ``"force_decomposed"``: the layer's own arithmetic,
            op for op; ``"auto"`` (default): the form each rule's cases show
            matches JAX at their tolerances, today the native op wherever
            ``"prefer_native"`` uses it.
        extra_rules: a ``jax2onnx.plugin.Rules`` (or a list of them) used
            for this call only, besides the installed plugins'.
        external_data: with ``return_mode="file"``, ``True`` stores the
            weights in ``<output_path>.data``, ``False`` keeps them in the
            model file (one self-contained file; weights above protobuf's
            2 GiB are refused, as no reader could load that file); ``None``
            (default) uses the external file only when the model would
            exceed protobuf's 2 GiB.
        source_metadata: ``True`` (default) records on every node where it
            came from, as ``metadata_props``: ``jax2onnx.source`` (the
            user's ``file:line (function)`` of the JAX equation),
            ``jax2onnx.primitive`` and, where one exists,
            ``jax2onnx.module`` (the Flax module path, the Equinox field
            path, the ``@onnx_function`` name, ``jax.named_scope`` names),
            which also prefixes the node's name. ``False`` writes none of it,
            for the smallest file.
        native_half_precision: ``False`` (default): a bfloat16 or float16 op
            that ONNX Runtime's CPU provider has no kernel for (most of them:
            ``Exp``, ``MatMul``, ``Add`` ...) computes in float32 between
            Casts, rounding back where JAX does, so the model runs everywhere
            with JAX's numbers. ``True`` keeps every half-precision op the ONNX
            schema allows, for runtimes with those kernels (TensorRT, ONNX
            Runtime CUDA and DirectML, onnxruntime-web WebGPU); ONNX Runtime
            CPU then refuses to load most bfloat16 models. See the precision
            page of the docs.

    Returns:
        An ``onnx.ModelProto`` (``"proto"``), an ``onnx_ir.Model`` (``"ir"``)
            or the path written (``"file"``).

    Raises:
        TypeError: an argument of the wrong type: a shape entry that is not
            an int or a string, an array of strings or objects, an
            ``input_params`` value that is not a number, bool or array, a
            ``fn`` that is not callable, a ``return_mode`` that is not a
            string ... The message names the argument (``inputs[1], axis 0``,
            ``input_params['scale']``, ``opset``, ``input_names[0]`` ...).
        ValueError: a value out of range or inconsistent with the others: a
            negative dimension, a malformed symbolic dimension, an opset
            outside 13..26, an unknown ``return_mode``, ``export_mode`` or
            ``normalization_mode``, ``"file"`` without ``output_path``,
            ``export_mode="web"`` with ``external_data=True``, an
            ``output_path`` that is a directory, more ``inputs`` than ``fn``
            takes, an ``input_params`` key ``fn`` has no parameter for, too
            many or repeated names, weights above protobuf's 2 GiB with
            ``external_data=False`` or ``export_mode="web"``. The message
            names the argument. Type and value errors are raised before
            ``fn`` is traced, except where only the traced graph tells (the
            number of outputs for ``output_names``, the ranks for
            ``inputs_as_nchw``, the size of the weights: raised before
            anything is written).
        jax2onnx.plugin.Jax2OnnxError: the conversion failed:
            ``UnsupportedPrimitiveError`` lists every primitive no loaded
            plugin lowers; ``LoweringError`` names the rule that failed and
            the user's source line; ``UsageError`` names ``fn`` when it
            returns no array (``None``) or something that is not an array.
        Exception: what ``fn`` raises while it is traced propagates
            unchanged, as do JAX's errors about it (``x * y`` on shapes that
            do not broadcast) and ``OSError`` from writing the file. A failed
            call leaves no file at ``output_path`` (nor its ``.data``).

    Example:
        ```python
        import jax, jax.numpy as jnp
        from jax2onnx import to_onnx

        w = jax.random.normal(jax.random.key(0), (30, 10))

        def model(x):
            return jnp.tanh(x @ w)

        proto = to_onnx(model, [("B", 30)])  # an onnx.ModelProto, batch size B
        path = to_onnx(model, [("B", 30)], return_mode="file", output_path="model.onnx")
        ```
    """
    from jax2onnx.conversion import serialize
    from jax2onnx.conversion.converter import step

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
        source_metadata=source_metadata,
        native_half_precision=native_half_precision,
    )
    timings = dict(result.report.timings)
    with step("serialize", timings):
        if mode == "ir":
            output = result.model
        elif mode == "file":
            if web:
                serialize.check_single_file(
                    result.model,
                    "export_mode='web'",
                    "use export_mode='standard' (weights in an external data file)",
                )
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
    from jax2onnx.conversion.converter import check_choice

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
    from jax2onnx.conversion.converter import check_choice

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
    model against this, not against the training-mode module (`allclose`
    does).

    A call that JAX cannot trace because a size depends on the data
    (``jnp.nonzero(x)``, ``x[mask]``, ``jnp.unique(x)`` inside ``jax.jit``,
    ``lax.scan`` or ``lax.cond``, which ``to_onnx`` converts with a dynamic
    dimension) runs again op by op under ``jax.disable_jit()``: JAX's own
    numbers, computed on the concrete arrays.

    Args:
        fn: the function or model, as given to `to_onnx`.
        input_params: the ``input_params`` given to `to_onnx`; a plugin may
            prepare a module differently when some of its flags stay inputs.
        opset: the target opset given to `to_onnx`.

    Returns:
        A callable taking ``fn``'s positional inputs (and ``input_params``
            as keywords) and returning JAX's outputs.
    """
    import functools

    import jax

    from jax2onnx.registration.prepare import PrepareConfig

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
