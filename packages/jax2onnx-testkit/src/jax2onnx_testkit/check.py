"""``check_case``: convert -> full checker -> ONNX Runtime -> compare with JAX -> expect_graph."""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Sequence
from typing import Any

import jax
import ml_dtypes
import numpy as np
import onnx

from jax2onnx import to_onnx, traced_callable
from jax2onnx.plugin import Case, Rules, complex_array, run_session, stored_array
from jax2onnx_testkit.expect import expect_graph
from jax2onnx_testkit.timing import PhaseClock, no_clock

# (rtol, atol) by dtype name; a case may override any of them.
DEFAULT_TOLERANCES = {
    "float64": (1e-10, 1e-10),
    "float32": (1e-5, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


@dataclasses.dataclass(frozen=True)
class CaseVariant:
    """One way of running a case: dtype precision and static or symbolic shapes.

    The pytest plugin passes these as ``jax2onnx_case``; make them with
    `variants_of`.

    Attributes:
        plugin: the plugin (or ``Rules``) name the case comes from.
        component: the primitive (or name) the case is filed under.
        case: the `Case`.
        precision: ``"f32"``, ``"f64"`` (traced under x64 with
            ``enable_double_precision=True``), or ``"bf16"``/``"f16"`` (float
            inputs drawn as bfloat16/float16; the model computes as the default
            export does, see the precision docs).
        dynamic: convert with symbolic dimensions and run at the case's
            dynamic sizes; otherwise at its static sizes.
        extra_rules: ``Rules`` passed to ``to_onnx(extra_rules=...)``.
        graph_checks: apply the case's graph expectations (False for a
            variant run at another opset than the case's, `at_opset`).
    """

    plugin: str
    component: str
    case: Case
    precision: str  # "f32", "f64", "bf16" or "f16"
    dynamic: bool
    extra_rules: tuple[Rules, ...] = ()
    # False for a case run at another opset than it was written for: its graph
    # expectations describe the graph at its own opset
    graph_checks: bool = True

    @property
    def id(self) -> str:
        """The stable test id, ``plugin/component/case[f32-static]``."""
        kind = "dynamic" if self.dynamic else "static"
        at = "" if self.graph_checks else f"@opset{self.case.opset}"
        return f"{self.plugin}/{self.component}/{self.case.name}[{self.precision}-{kind}]{at}"

    def at_opset(self, opset: int) -> CaseVariant:
        """This variant converted for ``opset``: numbers and the checker only."""
        case = dataclasses.replace(self.case, opset=opset)
        return dataclasses.replace(self, case=case, graph_checks=False)

    def __repr__(self) -> str:
        return f"CaseVariant({self.id})"


def _has_float_inputs(c: Case) -> bool:
    for i, spec in enumerate(c.inputs):
        if isinstance(spec, tuple):
            dtype = None if c.dtypes is None else c.dtypes[i]
            if dtype is None or np.issubdtype(np.dtype(dtype), np.inexact):
                return True
        elif np.issubdtype(np.asarray(spec).dtype, np.inexact):
            return True
    return False


def variants_of(
    plugin: str, component: str, c: Case, extra_rules: Sequence[Rules] = ()
) -> list[CaseVariant]:
    """The variants a case runs as.

    ``f32-static`` always; ``f64-static`` when the case has floating inputs
    (or the precisions ``Case.variants`` names); a ``-dynamic`` variant at
    the first precision when the inputs have symbolic dimensions.

    Args:
        plugin: the name the ids start with.
        component: the primitive (or name) the case is filed under.
        c: the case.
        extra_rules: ``Rules`` the conversions need (not installed ones).

    Returns:
        The `CaseVariant` objects, in that order.
    """
    precisions = c.variants or (("f32", "f64") if _has_float_inputs(c) else ("f32",))
    out = [CaseVariant(plugin, component, c, p, False, tuple(extra_rules)) for p in precisions]
    if c.symbols:
        out.append(CaseVariant(plugin, component, c, precisions[0], True, tuple(extra_rules)))
    return out


def _eval_dim(dim: Any, sizes: dict[str, int]) -> int:
    if isinstance(dim, int):
        return dim
    if not re.fullmatch(r"[\w\s+\-*/()]+", dim):
        raise ValueError(f"cannot evaluate dimension {dim!r}")
    unknown = sorted(set(re.findall(r"[A-Za-z_]\w*", dim)) - set(sizes))
    if unknown:
        raise ValueError(f"cannot evaluate dimension {dim!r}: no size for {unknown}")
    expr = re.sub(r"[A-Za-z_]\w*", lambda m: str(sizes[m.group(0)]), dim)
    return int(eval(expr, {"__builtins__": {}}))  # digits and operators only


_FLOATS = {
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f16": np.dtype(np.float16),
}


def _float(precision: str) -> np.dtype:
    return _FLOATS[precision]


def input_dtype(c: Case, i: int, precision: str) -> np.dtype:
    dtype = None if c.dtypes is None else c.dtypes[i]
    if dtype is None:
        return _float(precision)
    dtype = np.dtype(dtype)
    if dtype.kind == "c":  # complex cases run at both precisions, like float ones
        if precision in ("bf16", "f16"):
            raise ValueError(f"case {c.name!r}: complex inputs have no {precision} variant")
        return np.dtype(np.complex128 if precision == "f64" else np.complex64)
    if precision != "f64" and dtype.itemsize == 8 and dtype.kind in "fiu":
        raise ValueError(f"case {c.name!r}: 64-bit input dtype {dtype} needs variants=['f64']")
    return dtype


def _concrete(c: Case, precision: str, sizes: dict[str, int], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for i, spec in enumerate(c.inputs):
        if not isinstance(spec, tuple):
            arrays.append(_at_precision(np.asarray(spec), precision))
            continue
        shape = tuple(_eval_dim(d, sizes) for d in spec)
        dtype = input_dtype(c, i, precision)
        if dtype == np.bool_:
            arrays.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            unsigned = np.issubdtype(dtype, np.unsignedinteger)
            lo, hi = c.input_range or ((0, 10) if unsigned else (-5, 6))
            arrays.append(rng.integers(int(lo), int(hi), size=shape).astype(dtype))
        elif c.input_range is not None:
            arrays.append(_drawn(rng, shape, dtype, c.input_range))
        else:
            arrays.append(_drawn(rng, shape, dtype, None))
    return arrays


def _drawn(rng: Any, shape: Any, dtype: np.dtype, bounds: Any) -> np.ndarray:
    """Random data of ``dtype``: complex numbers get independent real and imaginary parts."""

    def draw() -> np.ndarray:
        if bounds is None:
            return rng.standard_normal(shape)
        return rng.uniform(bounds[0], bounds[1], size=shape)

    if dtype.kind == "c":
        return (draw() + 1j * draw()).astype(dtype)
    return draw().astype(dtype)


def _at_precision(array: np.ndarray, precision: str) -> np.ndarray:
    """A case's fixed input at the variant's precision (64-bit floats narrowed for f32,
    float32/float64 ones rounded to bfloat16/float16 for the half variants)."""
    if precision in ("bf16", "f16"):
        return array.astype(_float(precision)) if array.dtype.kind == "f" else array
    if precision == "f32":
        narrow = {np.float64: np.float32, np.complex128: np.complex64}.get(array.dtype.type)
        if narrow is not None:
            return array.astype(narrow)
    return array


def case_specs(c: Case, precision: str, sizes: dict[str, int] | None) -> list[Any]:
    """Conversion input specs: concrete sizes for static variants, symbols otherwise."""
    from jax import export

    scope = export.SymbolicScope(list(c.constraints))
    specs = []
    for i, spec in enumerate(c.inputs):
        if not isinstance(spec, tuple):
            array = _at_precision(np.asarray(spec), precision)
            specs.append(jax.ShapeDtypeStruct(array.shape, array.dtype))
            continue
        if sizes is not None:
            shape = tuple(_eval_dim(d, sizes) for d in spec)
        else:
            shape = tuple(
                d if isinstance(d, int) else export.symbolic_shape(d, scope=scope)[0] for d in spec
            )
        specs.append(jax.ShapeDtypeStruct(shape, input_dtype(c, i, precision)))
    return specs


def _tolerance(c: Case, dtype: np.dtype) -> tuple[float, float]:
    if c.tolerances and dtype.name in c.tolerances:
        return c.tolerances[dtype.name]
    return DEFAULT_TOLERANCES.get(dtype.name, (0.0, 0.0))


def compare(c: Case, expected: Sequence[Any], got: Sequence[np.ndarray], where: str) -> None:
    """Outputs must agree in count, dtype, shape and value (dtype-aware tolerances).

    Floats (complex too, and bfloat16) compare within the case's tolerance
    for their dtype, else the defaults (float32 ``1e-5``/``1e-5``, float64
    ``1e-10``/``1e-10``, float16 ``1e-2``/``1e-3``, bfloat16 ``2e-2``/``1e-2``),
    with NaNs in the same places; integers and booleans exactly. A complex
    output ONNX Runtime gives as float ``[..., 2]`` is compared as complex.

    Args:
        c: the case (for its tolerances).
        expected: JAX's outputs.
        got: ONNX Runtime's outputs.
        where: what the message names (the variant id and sizes).

    Raises:
        AssertionError: naming the output, the worst difference and the
            first values of both sides.
    """
    if len(expected) != len(got):
        raise AssertionError(f"{where}: JAX gives {len(expected)} outputs, ONNX Runtime {len(got)}")
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        want = np.asarray(want)
        if want.dtype.kind == "c" and have.dtype.kind == "f" and have.shape[-1:] == (2,):
            have = complex_array(have, want.dtype)  # stored as real and imaginary parts
        if want.dtype != have.dtype:
            raise AssertionError(f"{where}: output {i} dtype {have.dtype}, JAX {want.dtype}")
        if want.shape != have.shape:
            raise AssertionError(f"{where}: output {i} shape {have.shape}, JAX {want.shape}")
        rtol, atol = _tolerance(c, _real_dtype(want.dtype))
        if want.dtype.kind in "fc" or want.dtype.name == "bfloat16":
            wide = np.complex128 if want.dtype.kind == "c" else np.float64
            with np.errstate(invalid="ignore"):  # NaN of bfloat16 widens with a warning
                w, h = want.astype(wide), have.astype(wide)
            ok = np.allclose(h, w, rtol=rtol, atol=atol, equal_nan=True)
        else:  # integers and booleans: exact, whatever the case's tolerances say
            rtol = atol = 0
            w, h = want, have
            ok = np.array_equal(w, h)
        if not ok:
            raise AssertionError(
                f"{where}: output {i} differs from JAX ({_worst(w, h)}; rtol={rtol}, atol={atol})\n"
                f"JAX:  {np.array2string(w.ravel()[:12])}\nONNX: {np.array2string(h.ravel()[:12])}"
            )


def _real_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype whose tolerances apply: a complex dtype's part dtype."""
    if dtype.kind != "c":
        return dtype
    return np.dtype(np.float64 if dtype == np.complex128 else np.float32)


def _worst(w: np.ndarray, h: np.ndarray) -> str:
    """How two arrays of the same shape differ: mismatched NaNs, max abs diff, count."""
    if w.dtype.kind not in "fc":
        return f"{np.count_nonzero(w != h)} of {w.size} elements differ"
    nan_w, nan_h = np.isnan(w), np.isnan(h)
    parts = []
    if np.any(nan_w != nan_h):
        parts.append(f"NaN in {np.count_nonzero(nan_w != nan_h)} element(s) of one side only")
    both = ~(nan_w | nan_h)
    if np.any(both):
        with np.errstate(invalid="ignore"):  # inf - inf, made 0 below
            diff = np.where(w[both] == h[both], 0, np.abs(w[both] - h[both]))
        parts.append(f"max abs diff {np.max(diff):.3g}")
    return "; ".join(parts) or "values differ"


class _Reference:
    """JAX's outputs for a variant: what `jax2onnx.traced_callable` computes.

    float32 and float64 variants run it under ``jax.jit`` first: one XLA
    program per variant and size, where op-by-op dispatch compiles a program
    for every primitive, shape and dtype it meets (most of the suite's time
    went there). The two differ in the last bits where XLA fuses (a float32
    ``rsqrt`` feeding a float64 product is one ulp apart), so outputs that
    miss the compiled reference are compared again with the op-by-op one,
    whose verdict stands: a case passes at least whenever it passed against
    op-by-op JAX alone. A function ``jax.jit`` cannot take (sizes that
    depend on the data, a module that mutates its own state) runs op by op.
    Half-precision variants run op by op always: JAX rounds every op's
    result to bfloat16/float16 there, which is what the exported model
    computes, while XLA may keep a fused chain in float32.
    """

    def __init__(self, fn: Any, params: dict[str, Any], opset: int, precision: str) -> None:
        self.precision = precision
        self.params = params
        self.op_by_op = traced_callable(fn, params, opset)
        self.jitted = jax.jit(self.op_by_op) if precision in ("f32", "f64") else None

    def outputs(self, args: Sequence[np.ndarray], *, compiled: bool) -> list[np.ndarray] | None:
        """JAX's outputs, compiled or op by op; None when ``jax.jit`` cannot take the function."""
        if compiled and self.jitted is None:
            return None
        if self.precision in ("bf16", "f16"):  # NumPy arithmetic on ml_dtypes arrays: float32
            args = [jax.numpy.asarray(a) if a.dtype == _float(self.precision) else a for a in args]
        with jax.enable_x64(self.precision == "f64"):
            if compiled:
                try:
                    out = self.jitted(*args, **self.params)
                except Exception:  # raised again below if it is the function's own error
                    self.jitted = None  # the next size runs op by op at once
                    return None
            else:
                out = self.op_by_op(*args, **self.params)
            return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]

    def check(
        self, c: Case, args: Sequence[np.ndarray], got: Sequence[np.ndarray], where: str, clock
    ) -> None:
        """`compare` ONNX Runtime's outputs with JAX's (compiled, then op by op if they miss)."""
        expected = self.outputs(args, compiled=True)
        if expected is not None:
            try:
                return compare(c, expected, got, where)
            except AssertionError:
                pass
        with clock("jax.op_by_op"):
            expected = self.outputs(args, compiled=False)
        compare(c, expected, got, where)


def check_case(variant: CaseVariant, *, clock: PhaseClock | None = None) -> onnx.ModelProto:
    """Run the whole check for one case variant; returns the exported model.

    1. ``to_onnx`` converts the case (symbolic dimensions for a dynamic
       variant, concrete sizes otherwise).
    2. ``onnx.checker.check_model(model, full_check=True)`` passes.
    3. ONNX Runtime runs the model on seeded random inputs (at every dynamic
       size for a dynamic variant) and `compare` checks the outputs against
       JAX (`jax2onnx.traced_callable` of the case's function: compiled with
       ``jax.jit`` for float32 and float64 variants, and op by op where
       those outputs miss, for half precision and for functions ``jax.jit``
       cannot take).
    4. `expect_graph` checks the case's ``expect``, ``counts`` and
       ``no_unused_inputs`` (a dynamic variant's symbolic inputs must carry
       the symbol names); in static variants symbols in patterns are
       replaced by their sizes.

    Args:
        variant: the variant, as the ``jax2onnx_case`` parameter gives it.
        clock: a `jax2onnx_testkit.timing.PhaseClock` that receives the
            seconds each phase took (the pytest plugin's
            ``--jax2onnx-timings`` option passes one per test).

    Returns:
        The exported ``onnx.ModelProto``.

    Raises:
        AssertionError: outputs or graph differ from what the case says.
        Exception: whatever the conversion, the checker or ONNX Runtime
            raises.
    """
    import onnxruntime as ort

    clock = clock or no_clock
    c = variant.case
    with clock("case"):
        fn = c.fn() if c.factory else c.fn
    symbols = c.symbols
    static_sizes = {s: c.sizes(s)[0] for s in symbols}
    run_sizes = _dynamic_sizes(c) if variant.dynamic else [static_sizes]
    specs = case_specs(c, variant.precision, None if variant.dynamic else static_sizes)
    params = dict(c.input_params or {})
    kwargs = {"opset": c.opset} if c.opset is not None else {}
    with clock("convert"), jax.enable_x64(variant.precision == "f64"):
        model = to_onnx(
            fn,
            specs,
            input_params=params or None,
            enable_double_precision=variant.precision == "f64",
            extra_rules=list(variant.extra_rules) or None,
            **kwargs,
        )
    with clock("checker"):
        onnx.checker.check_model(model, full_check=True)
    with clock("jax"):
        reference = _Reference(fn, params, c.opset or 23, variant.precision)
    with clock("ort_session"):
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    names = [i.name for i in session.get_inputs()]
    seed = zlib.crc32(variant.id.encode())
    for sizes in run_sizes:
        args = _concrete(c, variant.precision, sizes, seed)
        feed = dict(zip(names[: len(args)], map(stored_array, args), strict=True))
        for key, value in params.items():
            meta = next(i for i in session.get_inputs() if i.name == key)
            feed[key] = np.asarray(value, dtype=_ort_numpy(meta.type))
        with clock("ort_run"):
            got = run_session(session, feed)
        with clock("jax"):
            reference.check(c, args, got, f"{variant.id} at sizes {sizes}", clock)
    if not variant.graph_checks:
        return model
    subs = {} if variant.dynamic else static_sizes
    expect_graph(
        model,
        c.expect,
        counts=c.counts,
        no_unused_inputs=c.no_unused_inputs,
        input_shapes=_symbolic_input_shapes(c, names) if variant.dynamic else None,
        subs=subs,
    )
    return model


def _dynamic_sizes(c: Case) -> list[dict[str, int]]:
    """The sizes a dynamic variant runs at: all but the static one (or that one alone)."""
    counts = {s: len(c.sizes(s)) for s in c.symbols}
    if len(set(counts.values())) > 1:
        raise ValueError(
            f"case {c.name!r}: dim_sizes must give every symbol the same number of sizes, "
            f"got {counts}"
        )
    n = next(iter(counts.values()))
    return [{s: c.sizes(s)[k] for s in c.symbols} for k in (range(1, n) if n > 1 else [0])]


def _symbolic_input_shapes(c: Case, names: Sequence[str]) -> dict[str, str]:
    shapes = {}
    dtypes = c.dtypes or (None,) * len(c.inputs)
    for name, spec, dtype in zip(names[: len(c.inputs)], c.inputs, dtypes, strict=True):
        if isinstance(spec, tuple) and any(isinstance(d, str) for d in spec):
            # a complex input is stored with its parts on a trailing axis of 2
            stored = (*spec, 2) if dtype is not None and np.dtype(dtype).kind == "c" else spec
            shapes[name] = "x".join(str(d).replace(" ", "") for d in stored)
    return shapes


def _ort_numpy(ort_type: str) -> Any:
    name = ort_type[len("tensor(") : -1]
    return {"float": np.float32, "double": np.float64}.get(name, name)
