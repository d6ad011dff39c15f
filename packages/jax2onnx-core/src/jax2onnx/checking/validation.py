"""Checking an exported model: ``allclose`` (JAX against ONNX Runtime) and the web runtime.

:func:`allclose` runs the function in JAX and the model in ONNX Runtime (CPU)
and compares; :func:`allclose_onnxruntime_web` runs the model in
onnxruntime-web (WebAssembly, under Node.js or in headless Chromium) and
compares it with ONNX Runtime CPU. The web runners are in :mod:`jax2onnx.checking.web`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def _is_shape(x: Any) -> bool:
    return isinstance(x, (tuple, list)) and all(
        isinstance(d, (int, str)) and not isinstance(d, bool) for d in x
    )


def validation_inputs(inputs: Sequence[Any], seed: int = 0, *, double: bool = False) -> list[Any]:
    """``inputs`` as concrete values: shape tuples become random data (string dims 2).

    The data is float32, or float64 with ``double`` (what ``to_onnx`` exports
    a shape tuple as with ``enable_double_precision``). Arrays (key arrays
    too) and pytrees of arrays are kept as they are.
    """
    rng = np.random.default_rng(seed)
    dtype = np.float64 if double else np.float32
    values = []
    for x in inputs:
        if _is_shape(x):
            shape = [d if isinstance(d, int) else 2 for d in x]
            values.append(rng.standard_normal(shape).astype(dtype))
        elif isinstance(x, (bool, int, float, complex, np.generic)):
            values.append(np.asarray(x))
        else:
            values.append(x)
    return values


def stored(x: Any) -> np.ndarray:
    """A value as the ONNX model holds it: a key array as its uint32 key data, a
    complex array as float real and imaginary parts on a trailing axis of 2.

    Other values are returned as NumPy arrays. Use it to feed an exported
    model in ONNX Runtime.

    Example:
        ```python
        import numpy as np
        from jax2onnx.plugin import stored_array

        assert stored_array(np.array([1 + 2j], np.complex64)).tolist() == [[1.0, 2.0]]
        ```
    """
    from jax2onnx.values.keys import complex_parts, is_complex, is_extended

    if is_extended(getattr(x, "dtype", None)):
        import jax

        return np.asarray(jax.random.key_data(x))
    array = np.asarray(x)
    return complex_parts(array) if is_complex(array.dtype) else array


def run_session(
    session: Any, feed: Mapping[str, Any], output_names: Sequence[str] | None = None
) -> list[np.ndarray]:
    """``session.run`` that also takes and gives bfloat16 arrays.

    ONNX Runtime's Python API has no NumPy type for bfloat16: this feeds
    ``ml_dtypes.bfloat16`` arrays from their raw bits and reads bfloat16
    outputs back as ``ml_dtypes.bfloat16`` arrays. Without bfloat16 on either
    side it is ``session.run(output_names, feed)``.

    Example:
        ```python
        import ml_dtypes, numpy as np, onnxruntime as ort
        from jax2onnx import to_onnx
        from jax2onnx.plugin import run_session

        x = np.ones((2, 3), ml_dtypes.bfloat16)
        model = to_onnx(lambda x: x * 2, [x])
        session = ort.InferenceSession(model.SerializeToString())
        (y,) = run_session(session, {session.get_inputs()[0].name: x})
        assert y.dtype == ml_dtypes.bfloat16
        ```
    """
    from jax2onnx.values.kernels import BFLOAT16

    arrays = {name: np.asarray(value) for name, value in feed.items()}
    metas = session.get_outputs()
    names = list(output_names) if output_names is not None else [m.name for m in metas]
    types = {m.name: m.type for m in metas}
    half_in = any(a.dtype == BFLOAT16 for a in arrays.values())
    if not half_in and all(types.get(n) != "tensor(bfloat16)" for n in names):
        return session.run(names, arrays)
    import onnxruntime as ort

    values = {}
    for name, array in arrays.items():
        array = np.require(array, requirements="C")  # keeps a scalar 0-d (ascontiguousarray
        # makes it 1-d, and ONNX Runtime would return (1,) for ())
        if array.dtype == BFLOAT16:
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                array.view(np.uint16),
                16,  # TensorProto.BFLOAT16
            )
        else:
            values[name] = ort.OrtValue.ortvalue_from_numpy(array)
    return [_numpy(v) for v in session.run_with_ort_values(names, values)]


def _numpy(value: Any) -> np.ndarray:
    """An output OrtValue as NumPy; bfloat16 read from its bytes."""
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    import ctypes

    from jax2onnx.values.kernels import BFLOAT16

    size = value.tensor_size_in_bytes()
    raw = bytes((ctypes.c_uint8 * size).from_address(value.data_ptr())) if size else b""
    return np.frombuffer(raw, np.uint16).view(BFLOAT16).reshape(value.shape()).copy()


def as_jax(value: Any) -> Any:
    """``value`` with its NumPy arrays (and NumPy scalars) as JAX arrays of the same dtype.

    What ``fn`` gets in JAX: ``x.at[...]`` and the other ``jax.Array``
    methods work on it. Call it under the precision the model was exported
    with (``jax.enable_x64``): without 64-bit types JAX narrows them, as
    ``to_onnx`` does. Key arrays, JAX arrays, Python numbers and other
    leaves are kept as they are.
    """
    import jax
    import jax.numpy as jnp

    from jax2onnx.values.keys import is_extended

    def convert(leaf: Any) -> Any:
        if not isinstance(leaf, (np.ndarray, np.generic)):
            return leaf
        try:
            return jnp.asarray(leaf)
        except (TypeError, ValueError):  # strings, objects: fn gets them as they are
            return leaf

    is_leaf = lambda v: is_extended(getattr(v, "dtype", None))  # noqa: E731
    return jax.tree_util.tree_map(convert, value, is_leaf=is_leaf)


def _key_data_or_array(x: Any) -> np.ndarray:
    from jax2onnx.values.keys import is_extended

    return stored(x) if is_extended(getattr(x, "dtype", None)) else np.asarray(x)


def _leaves(values: Sequence[Any]) -> list[Any]:
    """The leaves of ``values`` (key arrays are leaves), not yet stored."""
    import jax

    from jax2onnx.values.keys import is_extended

    is_leaf = lambda v: is_extended(getattr(v, "dtype", None))  # noqa: E731
    return jax.tree_util.tree_leaves(list(values), is_leaf=is_leaf)


def _to_channels_first(x: np.ndarray) -> np.ndarray:
    return np.moveaxis(x, -1, 1) if x.ndim >= 3 else x


def _to_channels_last(x: np.ndarray) -> np.ndarray:
    return np.moveaxis(x, 1, -1) if x.ndim >= 3 else x


def _selected(spec: Sequence[int | str] | None, index: int, name: str) -> bool:
    return spec is not None and (index in spec or name in spec)


def session(model_path: str | os.PathLike[str]) -> Any:
    """An ONNX Runtime CPU session without graph rewrites (the model's own numbers)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(
        os.fspath(model_path), sess_options=options, providers=["CPUExecutionProvider"]
    )


_ORT_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(bool)": np.bool_,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
}


def feed(
    session: Any,
    values: Sequence[Any],
    input_params: Mapping[str, Any],
    inputs_as_nchw: Sequence[int | str] | None = None,
) -> dict[str, np.ndarray]:
    """The model's inputs by name: the leaves of ``values`` in order, then ``input_params``."""
    metas = [m for m in session.get_inputs() if m.name not in input_params]
    leaves = _leaves(values)
    if len(leaves) != len(metas):
        raise ValueError(
            f"the model takes {len(metas)} positional input(s) "
            f"({', '.join(m.name for m in metas)}), {len(leaves)} were given"
        )
    result = {}
    for index, (meta, leaf) in enumerate(zip(metas, leaves, strict=True)):
        if _selected(inputs_as_nchw, index, meta.name):
            leaf = _to_channels_first(np.asarray(leaf))
        result[meta.name] = stored(leaf)
    names = {m.name: m for m in session.get_inputs()}
    for key, value in input_params.items():
        if key in names:
            result[key] = np.asarray(value, dtype=_ORT_NUMPY.get(names[key].type))
    return result


def _inexact(dtype: np.dtype) -> bool:
    from jax2onnx.values.kernels import BFLOAT16

    return np.issubdtype(dtype, np.inexact) or dtype == BFLOAT16


def compare(
    expected: Sequence[np.ndarray], got: Sequence[np.ndarray], rtol: float, atol: float, what: str
) -> tuple[bool, str]:
    """Floats within ``rtol``/``atol`` (NaN equal to NaN), everything else exactly."""
    if len(expected) != len(got):
        return False, f"{what}: {len(expected)} outputs expected, {len(got)} produced"
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        want, have = np.asarray(want), np.asarray(have)
        if want.shape != have.shape:
            return False, f"output {i}: shape {have.shape}, expected {want.shape} ({what})"
        inexact = any(_inexact(a.dtype) for a in (want, have))
        if not inexact:
            if not np.array_equal(want, have):
                bad = int(np.count_nonzero(want != have))
                return False, f"output {i}: {bad} of {want.size} values differ ({what})"
            continue
        wide = np.complex128 if "c" in (want.dtype.kind, have.dtype.kind) else np.float64
        w, h = want.astype(wide), have.astype(wide)
        if not np.allclose(w, h, rtol=rtol, atol=atol, equal_nan=True):
            diff = np.abs(w - h)
            worst = float(np.nanmax(diff)) if diff.size else 0.0
            return False, (
                f"output {i}: max abs difference {worst:.3g} (rtol={rtol}, atol={atol}; {what})"
            )
    return True, f"{len(got)} output(s) match (rtol={rtol}, atol={atol}; {what})"


def allclose(
    fn: Callable[..., Any],
    onnx_model_path: str | os.PathLike[str],
    inputs: Sequence[Any],
    input_params: Mapping[str, Any] | None = None,
    rtol: float = 1e-3,
    atol: float = 1e-5,
    *,
    enable_double_precision: bool = False,
    inputs_as_nchw: Sequence[int | str] | None = None,
    outputs_as_nchw: Sequence[int | str] | None = None,
) -> tuple[bool, str]:
    """Run ``fn`` in JAX and the ONNX model in ONNX Runtime (CPU) and compare the outputs.

    Args:
        fn: what was converted; it runs as :func:`jax2onnx.traced_callable`
            sees it (a module in inference mode).
        onnx_model_path: the model file.
        inputs: concrete arrays (or pytrees of them, as ``fn`` takes them),
            or shape tuples: random float32 data is drawn (float64 with
            ``enable_double_precision``), string dims are 2. NumPy arrays
            reach ``fn`` as JAX arrays of the same dtype.
        input_params: keyword arguments of ``fn``; those that are graph
            inputs of the model are fed to it by name (NumPy arrays reach
            ``fn`` as JAX arrays).
        rtol: relative tolerance for floating (and complex) outputs.
        atol: absolute tolerance for floating outputs; other outputs must be
            equal. NaNs compare equal to NaNs.
        enable_double_precision: run JAX with 64-bit types and draw float64
            data for shape tuples (as the model was exported with
            ``enable_double_precision=True``).
        inputs_as_nchw: as given to `to_onnx` (positions or names): these
            ``inputs`` are channels-last as ``fn`` takes them and are moved
            channels-first for the model.
        outputs_as_nchw: as given to `to_onnx`: these outputs of the model
            are moved channels-last before comparing.

    Returns:
        ``(matches, message)``; the message says which output differs and by
            how much, and points at `verify` to find the operation where it
            starts. A model file that ONNX Runtime cannot load (missing,
            corrupt, an op it has no kernel for) or cannot run with these
            inputs is ``(False, why)``: the file and ONNX Runtime's reason.

    Example:
        ```python
        import jax.numpy as jnp
        from jax2onnx import allclose, to_onnx

        path = to_onnx(jnp.tanh, [("B", 3)], return_mode="file", output_path="tanh.onnx")
        ok, message = allclose(jnp.tanh, path, [jnp.ones((5, 3))])
        assert ok, message
        ```
    """
    import jax

    from jax2onnx.frontend.api import traced_callable
    from jax2onnx.values.keys import from_parts, is_complex

    double = bool(enable_double_precision)
    xs = validation_inputs(inputs, double=double)
    params = dict(input_params or {})
    path = os.fspath(onnx_model_path)
    try:
        ort_session = session(path)
    except ImportError:
        raise
    except Exception as err:  # missing, corrupt, an op ORT lacks: a failed check, said why
        return False, f"ONNX Runtime could not load {path!r}: {err}"
    try:
        ort_feed = feed(ort_session, xs, params, inputs_as_nchw)
        got = run_session(ort_session, ort_feed)
    except Exception as err:  # a feed that does not fit the model: a failed check, said why
        return False, f"ONNX Runtime could not run {path!r}: {err}"
    reference = traced_callable(fn, params)
    with jax.enable_x64(double):
        out = reference(*as_jax(xs), **as_jax(params))
        # key arrays as their key data; complex values stay complex, compared as such
        expected = [_key_data_or_array(x) for x in _leaves([out])]
    names = [o.name for o in ort_session.get_outputs()]
    for i, want in enumerate(expected[: len(got)]):
        if is_complex(want.dtype) and got[i].shape[-1:] == (2,):
            got[i] = from_parts(got[i], want.dtype)  # real and imaginary parts
        if _selected(outputs_as_nchw, i, names[i]):
            got[i] = _to_channels_last(got[i])
    ok, message = compare(expected, got, rtol, atol, "JAX vs ONNX Runtime")
    if not ok:
        message += (
            ". jax2onnx.verify(fn, inputs) (or `jax2onnx verify MODULE:FN`) names the first "
            "operation that departs and its source line"
        )
    return ok, message


def allclose_onnxruntime_web(
    onnx_model_path: str | os.PathLike[str],
    inputs: Sequence[Any],
    input_params: Mapping[str, Any] | None = None,
    rtol: float = 1e-3,
    atol: float = 1e-5,
    *,
    inputs_as_nchw: Sequence[int | str] | None = None,
    node_command: str = "node",
    runner: str | None = None,
) -> tuple[bool, str]:
    """Run the model in onnxruntime-web (WebAssembly) and compare with ONNX Runtime CPU.

    A deployment check for models written with ``to_onnx(...,
    return_mode="file", export_mode="web")``: the model runs once in ONNX
    Runtime's Python CPU build and once in onnxruntime-web, and the outputs
    are compared. Values travel to the web runtime as raw bytes, so NaN,
    -0.0, int64 and float16 arrive exactly.

    The npm package ``onnxruntime-web`` is found through
    ``JAX2ONNX_ONNXRUNTIME_WEB`` (its directory), else ``node_modules`` in
    the working directory or one of its parents, else npm's global root.
    Chromium is ``JAX2ONNX_CHROMIUM``, else ``chromium``, ``chromium-browser``
    or ``google-chrome`` on ``PATH``. Nothing is downloaded.

    Args:
        onnx_model_path: the model file.
        inputs: concrete arrays (or shape tuples: random float32 data, string
            dims 2), fed to the model's positional inputs in order.
        input_params: values of the model's named runtime-parameter inputs.
        rtol: relative tolerance for floating outputs.
        atol: absolute tolerance for floating outputs; other outputs must be
            equal.
        inputs_as_nchw: inputs (positions or names) given channels-last that
            the model takes channels-first.
        node_command: the Node.js executable (the ``"node"`` runner).
        runner: ``"node"`` (onnxruntime-web under Node.js) or ``"chrome"`` /
            ``"browser"`` (a page in headless Chromium); default: the
            ``JAX2ONNX_ONNXRUNTIME_WEB_RUNNER`` environment variable, else
            ``"node"``.

    Returns:
        ``(matches, message)``; when a runtime or the browser is missing, or
            the model fails in it, ``matches`` is False and the message says why.
    """
    from jax2onnx.checking import web

    name = runner if runner is not None else os.environ.get(web.RUNNER_VARIABLE, "node")
    if not isinstance(name, str) or name.strip().lower() not in web.RUNNERS:
        return False, f"runner must be one of {sorted(web.RUNNERS)}, got {name!r}"
    name = web.RUNNERS[name.strip().lower()]
    xs = validation_inputs(inputs)
    params = dict(input_params or {})
    try:
        ort_session = session(onnx_model_path)
        ort_feed = feed(ort_session, xs, params, inputs_as_nchw)
        expected = run_session(ort_session, ort_feed)
    except Exception as err:  # the model or the feed is at fault: say so, as for the web
        return False, f"ONNX Runtime (CPU) could not run {os.fspath(onnx_model_path)!r}: {err}"
    try:
        got = web.run(name, os.fspath(onnx_model_path), ort_feed, node_command=node_command)
    except web.WebRuntimeError as err:
        return False, str(err)
    return compare(expected, got, rtol, atol, f"onnxruntime-web ({name}) vs ONNX Runtime CPU")
