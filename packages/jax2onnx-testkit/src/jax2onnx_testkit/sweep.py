"""Dtype sweeps: one primitive at every dtype JAX accepts, on small and zero-size arrays.

A case checks the dtypes its author thought of; a sweep asks JAX which dtypes
a primitive takes and checks all of them. A `Probe` names a primitive and a
function that reaches it; `sweep` traces the function at each dtype of
`DTYPES` (at the probe's small shapes and, when it has them, its zero-size
shapes), keeps the dtypes JAX accepts (it traces them, the primitive is in
the jaxpr and JAX runs them on CPU), converts them all as one model per
precision mode (32-bit dtypes as JAX does by default, the 64-bit ones under
x64 with ``enable_double_precision=True``), runs it in ONNX Runtime and
compares every output with JAX at the testkit's dtype-aware tolerances. When
a model fails, each member is converted on its own so the failure names its
dtype and shape.

```python
from jax import lax
from jax2onnx_testkit.sweep import Probe, sweep

result = sweep(Probe("sin", lax.sin))
assert not result.failures  # {("float16", "small"): "why", ...} when some fail
```

A plugin's test module parametrises a test over its probes with
`check_sweep`, which compares ``result.failures`` with the probe's ``known``
failures (each with a reason), so a fixed gap fails the test until its entry
is removed; `check_complete` keeps the probes in step with the plugin's
lowerings.
"""

from __future__ import annotations

import dataclasses
import types
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax
import ml_dtypes
import numpy as np
import onnx

from jax2onnx import to_onnx
from jax2onnx.plugin import run_session, stored_array
from jax2onnx_testkit.check import compare

_BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES_32 = tuple(
    np.dtype(d) for d in (np.bool_, np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)
) + (np.dtype(np.float16), _BF16, np.dtype(np.float32), np.dtype(np.complex64))
DTYPES_64 = tuple(np.dtype(d) for d in (np.int64, np.uint64, np.float64, np.complex128))
DTYPES = DTYPES_32 + DTYPES_64
"""Every dtype a sweep tries: bool, int8..int64, uint8..uint64, float16,
bfloat16, float32, float64, complex64 and complex128."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """One primitive and a function that reaches it, for `sweep`.

    Attributes:
        primitive: the primitive's name (``jax.core.Primitive.name``, or the
            name a plugin lowers for an intercepted function); the probe's id.
        fn: takes arrays and returns an array or a tuple of them; every
            input takes the swept dtype unless ``fixed`` says otherwise.
        shapes: the inputs' small shapes.
        zero_shapes: the inputs' zero-size shapes, or None where the
            primitive has no zero-size form.
        fixed: input position -> dtype, for inputs that do not follow the
            swept dtype (indices, predicates, keys).
        contains: primitive names of which one must be in the jaxpr at a
            dtype for that dtype to count (default: ``primitive``).
        eager: the primitive is a function a plugin intercepts (a name such
            as ``lax.numpy.unique`` or ``nn.relu``, absent from jaxprs): a
            dtype counts when JAX traces ``fn``, or, where sizes depend on
            the data, runs it op by op (which then gives the reference).
        data: ``(rng, shape, dtype, position) -> array`` for inputs that need
            particular values (nonzero divisors, a domain, valid indices);
            None for the default draws.
        tolerances: ``{dtype name: (rtol, atol)}`` over the testkit defaults.
        known: ``{(dtype name, "small" | "zero"): reason}``: the failures a
            test expects; a test that compares them strictly finds fixed
            gaps too.
        dtypes: the dtype names to try when the primitive is defined for a
            few only (the bits of a PRNG); empty for every one `sweep` is given.
        label: a suffix telling several probes of one primitive apart.
    """

    primitive: str
    fn: Callable[..., Any]
    shapes: Sequence[tuple[int, ...]] = ((2, 3),)
    zero_shapes: Sequence[tuple[int, ...]] | None = ((0, 3),)
    fixed: Mapping[int, Any] = dataclasses.field(default_factory=dict)
    contains: Sequence[str] = ()
    eager: bool = False
    data: Callable[..., np.ndarray] | None = None
    tolerances: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    known: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    dtypes: Sequence[str] = ()
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.primitive}-{self.label}" if self.label else self.primitive


@dataclasses.dataclass
class SweepResult:
    """What `sweep` found for one probe.

    Attributes:
        passed: ``(dtype name, "small" | "zero")`` pairs that converted and
            matched JAX.
        failures: the same pairs -> what went wrong.
        refused_by_jax: dtype names JAX does not accept (it fails to trace
            or to run them, or lowers them without the primitive).
    """

    passed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    failures: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    refused_by_jax: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Member:
    dtype: np.dtype
    size: str  # "small" or "zero"
    specs: list[jax.ShapeDtypeStruct]
    args: list[np.ndarray]
    expected: list[np.ndarray] | None  # None until JAX has computed it

    @property
    def key(self) -> tuple[str, str]:
        return (self.dtype.name, self.size)


def sweep(probe: Probe, dtypes: Sequence[Any] = DTYPES) -> SweepResult:
    """Convert and check ``probe`` at every dtype in ``dtypes`` JAX accepts.

    Args:
        probe: the primitive and how to reach it.
        dtypes: the dtypes to try (default `DTYPES`).

    Returns:
        A `SweepResult`; its ``failures`` is empty when every dtype JAX
        accepts converts and matches.
    """
    result = SweepResult()
    wanted = [np.dtype(d) for d in dtypes]
    if probe.dtypes:
        wanted = [d for d in wanted if d.name in probe.dtypes]
    for x64, group in ((False, DTYPES_32), (True, DTYPES_64)):
        chosen = [d for d in group if d in wanted]
        if not chosen:
            continue
        with jax.enable_x64(x64):
            members = _members(probe, chosen, result)
            _check_group(probe, members, x64, result)
    return result


def _members(probe: Probe, dtypes: Sequence[np.dtype], result: SweepResult) -> list[_Member]:
    """The dtypes and sizes JAX traces to the primitive, with JAX's outputs on drawn data."""
    sizes = [("small", probe.shapes)]
    if probe.zero_shapes is not None:
        sizes.append(("zero", probe.zero_shapes))
    wanted = set(probe.contains or (probe.primitive,))
    members = []
    for dtype in dtypes:
        for size, shapes in sizes:
            specs = [
                jax.ShapeDtypeStruct(shape, np.dtype(probe.fixed.get(i, dtype)))
                for i, shape in enumerate(shapes)
            ]
            seed = zlib.crc32(f"{probe.id}/{dtype.name}/{size}".encode())
            member = _Member(dtype, size, specs, _draw(probe, specs, seed), None)
            try:
                jaxpr = jax.make_jaxpr(probe.fn)(*specs)
            except Exception:  # JAX does not take this dtype, or sizes depend on the data
                if not probe.eager:
                    continue
                try:  # op by op, where jnp.unique and the like give sizes from the data
                    member.expected = _outputs(probe.fn(*member.args))
                except Exception:  # JAX does not take this dtype
                    continue
            else:
                if not probe.eager and not wanted & set(_primitives(jaxpr.jaxpr)):
                    continue
            members.append(member)
    computed = [m for m in members if m.expected is None]
    try:  # one XLA program for all: compiling is most of a sweep's time
        _reference(probe, computed)
    except Exception:  # some member JAX traces but cannot run on CPU
        for member in computed:
            try:
                _reference(probe, [member])
            except Exception:
                members.remove(member)
    # a dtype JAX cannot compute at the small shapes is not one it accepts, even where
    # it returns the empty result of the zero-size ones without computing anything
    small = {m.dtype.name for m in members if m.size == "small"}
    members = [m for m in members if m.dtype.name in small]
    taken = {m.dtype.name for m in members}
    result.refused_by_jax.extend(d.name for d in dtypes if d.name not in taken)
    return members


def _bundle(probe: Probe, members: Sequence[_Member]) -> Callable[..., list[Any]]:
    """``probe.fn`` of every member's inputs, in one function of all of them."""
    arity = [len(m.specs) for m in members]

    def bundle(*flat: Any) -> list[Any]:
        outs, start = [], 0
        for n in arity:
            outs.append(jax.tree_util.tree_leaves(probe.fn(*flat[start : start + n])))
            start += n
        return outs

    return bundle


def _reference(probe: Probe, members: Sequence[_Member]) -> None:
    if not members:
        return
    outs = jax.jit(_bundle(probe, members))(*(a for m in members for a in m.args))
    for member, out in zip(members, outs, strict=True):
        member.expected = _outputs(out)


def _outputs(out: Any) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]


def _primitives(jaxpr: Any) -> Iterator[str]:
    for eqn in jaxpr.eqns:
        yield eqn.primitive.name
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", None)
                if inner is not None:  # a ClosedJaxpr's jaxpr, or a Jaxpr
                    yield from _primitives(getattr(inner, "jaxpr", inner))
                elif hasattr(sub, "eqns"):
                    yield from _primitives(sub)


def _draw(probe: Probe, specs: Sequence[jax.ShapeDtypeStruct], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for i, spec in enumerate(specs):
        dtype = np.dtype(spec.dtype)
        if probe.data is not None:
            array = probe.data(rng, spec.shape, dtype, i)
            if array is not None:
                arrays.append(np.asarray(array).astype(dtype))
                continue
        if dtype == np.bool_:
            arrays.append(rng.random(spec.shape) < 0.5)
        elif dtype.kind in "iu":
            lo = 0 if dtype.kind == "u" else -5
            arrays.append(rng.integers(lo, 6, size=spec.shape).astype(dtype))
        elif dtype.kind == "c":
            parts = rng.standard_normal((2, *spec.shape))
            arrays.append((parts[0] + 1j * parts[1]).astype(dtype))
        else:
            arrays.append(rng.standard_normal(spec.shape).astype(dtype))
    return arrays


def _check_group(probe: Probe, members: list[_Member], x64: bool, result: SweepResult) -> None:
    if not members:
        return
    if len(members) > 1:
        try:
            _check(probe, members, x64)
        except Exception:  # find out which member fails
            pass
        else:
            result.passed.extend(m.key for m in members)
            return
    for member in members:
        try:
            _check(probe, [member], x64)
        except Exception as e:
            lines = str(e).strip().splitlines()
            result.failures[member.key] = f"{type(e).__name__}: {lines[0] if lines else ''}"
        else:
            result.passed.append(member.key)


def _check(probe: Probe, members: Sequence[_Member], x64: bool) -> None:
    """One model computing ``probe.fn`` for every member; raises on any difference."""
    import onnxruntime as ort

    def bundle(*flat: Any) -> list[Any]:
        return [x for outs in _bundle(probe, members)(*flat) for x in outs]

    specs = [s for m in members for s in m.specs]
    model = to_onnx(bundle, specs, enable_double_precision=x64)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feed = dict(zip(names, (stored_array(a) for m in members for a in m.args), strict=True))
    got = run_session(session, feed)
    tolerances = types.SimpleNamespace(tolerances=dict(probe.tolerances))
    start = 0
    for m in members:
        n = len(m.expected)
        compare(tolerances, m.expected, got[start : start + n], f"{probe.id} {m.key}")
        start += n


def check_sweep(probe: Probe) -> SweepResult:
    """`sweep` the probe; fail on a failure its ``known`` does not list, or a listed one
    that passes now (so a fixed gap is noticed), and when JAX took none of the dtypes.

    Raises:
        AssertionError: naming the probe and the failures.
    """
    result = sweep(probe)
    if not (result.passed or result.failures):
        raise AssertionError(f"{probe.id}: JAX took no dtype: fix the probe")
    unexpected = {k: v for k, v in result.failures.items() if k not in probe.known}
    fixed = sorted(set(probe.known) - set(result.failures))
    if unexpected or fixed:
        raise AssertionError(
            f"{probe.id}: failures not listed in its known ones: {unexpected}; "
            f"listed but passing now: {fixed}"
        )
    return result


def check_complete(
    lowered: Iterable[str], probes: Sequence[Probe], not_swept: Mapping[str, str]
) -> None:
    """Every name in ``lowered`` has a probe or a reason in ``not_swept``, and neither
    names a primitive that is not lowered.

    Raises:
        AssertionError: listing the names without either, or the stray entries.
    """
    lowered = set(lowered)
    covered = {p.primitive for p in probes} | set(not_swept)
    missing, stray = sorted(lowered - covered), sorted(covered - lowered)
    if missing or stray:
        raise AssertionError(
            f"lowerings without a probe or a reason in NOT_SWEPT: {missing}; "
            f"probes or reasons for primitives that are not lowered: {stray}"
        )
