"""``verify``: the first equation whose ONNX value departs from JAX's, and its source line.

The function is converted with a :class:`~jax2onnx.values.provenance.Recorder`
attached, so every user equation lowered into the main graph is known with
the values holding its outputs. Those values (where the clean-up passes
kept them, by name) become extra outputs of a copy of the model, which ONNX
Runtime runs once. The same jaxpr is then evaluated in JAX equation by
equation on the same inputs (a ``jit`` body the converter inlined is
entered, so its equations are compared one by one too) and each recorded
output is compared with ONNX Runtime's at dtype-aware tolerances. The
report names the first equation that departs, with the error of its inputs
and its error when recomputed from ONNX Runtime's own inputs: whether the
error starts there or is carried in and amplified.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jax2onnx.checking.divergence import Entry, Error, VerifyReport, error
from jax2onnx.values.provenance import Record, Recorder

_BOUNDARY_OPS = frozenset({"Loop", "If", "Scan"})


def verify(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    input_params: Mapping[str, Any] | None = None,
    model: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    progress: bool = False,
    **to_onnx_kwargs: Any,
) -> VerifyReport:
    """Find the first operation whose ONNX Runtime value departs from JAX's.

    Converts ``fn`` (as `to_onnx` would, with ``to_onnx_kwargs``), runs the
    model in ONNX Runtime with the value of every equation exposed, evaluates
    the same jaxpr in JAX equation by equation on the same inputs, and
    compares each value. Values the clean-up passes fused into one op
    (a ``LayerNormalization``) are compared where the fused op's output is.
    Equations inside a ``Loop``/``If``/``Scan`` body are compared at the
    body's boundary: the equation that holds them.

    Args:
        fn: what `to_onnx` converts (a function, an NNX or Equinox module ...).
        inputs: concrete values for ``fn``'s positional inputs (arrays or
            pytrees of them); shape tuples draw random float32 data
            (float64 with ``enable_double_precision``), with string
            dimensions 2.
        input_params: keyword arguments of ``fn``, as for `to_onnx`; their
            values are used in both runs.
        model: an exported model to check instead of a fresh conversion (a
            path, an ``onnx.ModelProto`` or an ``onnx_ir.Model``). It must
            come from the same conversion (same arguments, same jax2onnx):
            values are matched by name; where a name is missing only the
            outputs are compared.
        rtol: relative tolerance for every float value; by default per dtype
            (float32 1e-3, float16 1e-2, bfloat16 4e-2, float64 1e-7).
        atol: absolute tolerance for every float value; by default per dtype
            (float32 1e-5, float16 1e-3, bfloat16 1e-2, float64 1e-10). It is
            scaled by the largest magnitude of the JAX value (at least 1), so
            a value in the thousands is judged by its own rounding.
        progress: print a progress bar on standard error while JAX runs.
        **to_onnx_kwargs: `to_onnx`'s other arguments (``opset``,
            ``enable_double_precision``, ``inputs_as_nchw``, ``extra_rules``
            ...); the output ones are ignored.

    Returns:
        A `VerifyReport`; ``print(report.summary())`` shows it.

    Example:
        ```python
        import jax.numpy as jnp
        from jax2onnx import verify

        report = verify(lambda x: jnp.tanh(x) * 2, [jnp.ones((2, 3))])
        assert report.ok, report.summary()
        ```
    """
    import jax

    from jax2onnx.checking import validation
    from jax2onnx.frontend import api

    kwargs = dict(to_onnx_kwargs)
    for name in ("return_mode", "output_path", "export_mode", "external_data"):
        kwargs.pop(name, None)
    double = bool(kwargs.get("enable_double_precision", False))
    xs = validation.validation_inputs(inputs, double=double)
    params = dict(input_params or {})
    recorder = Recorder()
    result = _convert(api, fn, inputs, params, recorder, kwargs)
    onnx_model, notes = _exposed(result.model, model, recorder)
    producers = {v.name: node for node in onnx_model.graph for v in node.outputs if v.name}
    with tempfile.TemporaryDirectory(prefix="jax2onnx-verify-") as tmp:
        from jax2onnx.conversion import serialize

        path = serialize.save(onnx_model, os.path.join(tmp, "model.onnx"))
        session = validation.session(path)
        ort_feed = validation.feed(session, xs, params, kwargs.get("inputs_as_nchw"))
        wanted = [o.name for o in session.get_outputs()]
        got = dict(zip(wanted, validation.run_session(session, ort_feed, wanted)))
    leaves = [*validation._leaves(xs), *(params[k] for k in _param_keys(result, params))]
    with jax.enable_x64(double):
        walk = _Walk(result.jaxpr, recorder, got, producers, rtol, atol, progress)
        walk.run(leaves, [v.name for v in result.model.graph.inputs])
    outputs = _compare_outputs(result, walk, got, kwargs, rtol, atol)
    first = next((e for e in walk.entries if not e.error.within), None)
    if first is not None:
        with jax.enable_x64(double):
            first = walk.localize(first)
        entries = tuple(first if e.index == first.index else e for e in walk.entries)
    else:
        entries = tuple(walk.entries)
    ok = first is None and all(e.within for e in outputs.values())
    return VerifyReport(
        ok,
        first,
        entries,
        outputs,
        walk.equations,
        walk.equations - len(entries),
        tuple(notes + walk.notes),
    )


def _convert(api: Any, fn, inputs, params, recorder: Recorder, kwargs: dict[str, Any]) -> Any:
    from jax2onnx.conversion import converter, specs

    extra = api._extra(kwargs.pop("extra_rules", None))
    plugin_set = api._plugins()
    options = converter.Options(input_params=params or None, **kwargs)
    specs.check_inputs(inputs)  # fn's signature is checked after the prepare hook
    return converter.convert(
        fn,
        inputs,
        options,
        plugin_set=plugin_set,
        registry=plugin_set.registry(extra),
        recorder=recorder,
    )


def _param_keys(result: Any, params: Mapping[str, Any]) -> list[str]:
    """The ``input_params`` keys that are inputs of the traced jaxpr, in its order."""
    graph_inputs = [v.name for v in result.model.graph.inputs]
    return [name for name in graph_inputs if name in params]


def _exposed(ours: Any, given: Any, recorder: Recorder) -> tuple[Any, list[str]]:
    """The model to run, with every recorded value that is in its main graph as an output."""
    from jax2onnx.values.ir import ir

    notes: list[str] = []
    if given is None:
        model = ours
    elif isinstance(given, ir.Model):
        model = given
    elif isinstance(given, (str, os.PathLike)):
        model = ir.load(os.fspath(given))
    else:
        model = ir.serde.deserialize_model(given)
    graph = model.graph
    produced = {v.name: v for node in graph for v in node.outputs if v.name}
    present = {v.name for v in graph.outputs}
    missing = 0
    for record in recorder:
        for name in record.names:
            if name is None or name in present:
                continue
            value = produced.get(name)
            if value is None:
                missing += given is not None
                continue
            if value.dtype is None:
                continue
            graph.outputs.append(value)
            present.add(name)
    if missing:
        notes.append(
            f"{missing} value(s) of this conversion are not in the given model "
            "(was it made with other arguments?); those equations were not compared"
        )
    return model, notes


class _Walk:
    """JAX's evaluation of the jaxpr, equation by equation, compared as it goes."""

    def __init__(self, closed, recorder, got, producers, rtol, atol, progress) -> None:
        self.closed = closed
        self.records: dict[tuple[int, ...], Record] = recorder.records
        self.got = got  # ONNX Runtime's values by name
        self.producers = producers  # the final graph's nodes by the names of their outputs
        self.var_names: dict[tuple[tuple[int, ...], int], str] = {}  # (jaxpr, var) -> name
        self.rtol, self.atol = rtol, atol
        self.entries: list[Entry] = []
        self.notes: list[str] = []
        self.equations = 0
        self.ins: dict[str, list[Any]] = {}  # the JAX inputs of each compared equation
        self.progress = _Progress(len(recorder.records)) if progress else None
        self.outs: list[Any] = []

    def run(self, leaves: Sequence[Any], input_names: Sequence[str]) -> None:
        jaxpr = self.closed.jaxpr
        args = [_as_aval_dtype(x, v.aval) for x, v in zip(leaves, jaxpr.invars)]
        if len(input_names) == len(jaxpr.invars):  # graph inputs: the same data on both sides
            for var, arg, name in zip(jaxpr.invars, args, input_names):
                self.got.setdefault(name, stored_value(arg))
                self.var_names[((), id(var))] = name
        self.outs = self._jaxpr(jaxpr, self.closed.consts, args, ())
        if self.progress is not None:
            self.progress.done()

    def _jaxpr(self, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], base) -> list[Any]:
        from jax._src import core as jax_core

        env: dict[Any, Any] = {}
        base = tuple(base)
        for var, value in zip(jaxpr.constvars, consts):
            env[var] = value
        for var, value in zip(jaxpr.invars, args):
            env[var] = value

        def read(var: Any) -> Any:
            return var.val if _is_literal(var) else env[var]

        for i, eqn in enumerate(jaxpr.eqns):
            path = (*base, i)
            record = self.records.get(path)
            ins = [read(v) for v in eqn.invars]
            self.equations += 1
            inner = _entered(eqn, record)
            if inner is not None:
                body, body_consts = inner
                for var, outer in zip(body.invars, eqn.invars):
                    name = None if _is_literal(outer) else self.var_names.get((base, id(outer)))
                    if name is not None:
                        self.var_names[((*path, 0), id(var))] = name
                outs = self._jaxpr(body, body_consts, ins, (*path, 0))
            else:
                outs = bind(eqn, ins)
            for var, out in zip(eqn.outvars, outs):
                if not isinstance(var, jax_core.DropVar):
                    env[var] = out
            if record is not None:
                self._compare(record, eqn, ins, outs)
                if self.progress is not None:
                    self.progress.step()
        return [read(v) for v in jaxpr.outvars]

    def _compare(self, record: Record, eqn: Any, ins: list[Any], outs: list[Any]) -> None:
        errors = []
        for name, out in zip(record.names, outs):
            if name is None or name not in self.got:
                continue
            errors.append(error(stored_value(out), self.got[name], self.rtol, self.atol))
        if not errors:
            return
        worst = max(errors, key=lambda e: (not e.within, e.max_abs))
        index = ".".join(map(str, record.path))
        self.ins[index] = ins
        base = record.path[:-1]
        input_errors = []
        for var, value in zip(eqn.invars, ins):
            name = self.var_names.get((base, id(var)))
            if name is None:
                input_errors.append(None)
            else:
                input_errors.append(
                    error(stored_value(value), self.got[name], self.rtol, self.atol)
                )
        self.entries.append(
            Entry(
                index=index,
                primitive=record.origin.primitive,
                source=record.origin.source,
                module=record.origin.module,
                avals=", ".join(str(v.aval.str_short()) for v in eqn.outvars),
                error=worst,
                inputs=tuple(input_errors),
                nodes=_nodes(record, self.producers),
                note=_note(record, self.producers),
            )
        )
        for var, name in zip(eqn.outvars, record.names):
            if name is not None and name in self.got:
                self.var_names[(base, id(var))] = name

    def localize(self, entry: Entry) -> Entry:
        """``entry`` with JAX's recomputation from ONNX Runtime's inputs compared to
        ONNX Runtime's output (``local``) and to JAX's own output (``carried``)."""
        path = tuple(int(p) for p in entry.index.split("."))
        record = self.records[path]
        eqn = record.eqn
        own_ins = self.ins[entry.index]
        ins = []
        for var, value in zip(eqn.invars, own_ins):
            name = self.var_names.get((path[:-1], id(var)))
            ins.append(value if name is None else _from_stored(self.got[name], var.aval))
        try:
            again = bind(eqn, ins)
            own = bind(eqn, own_ins)
        except Exception as err:  # an equation that cannot run on those values
            return dataclasses.replace(entry, note=f"{entry.note} (recomputation failed: {err})")
        local, carried = [], []
        for name, out, ref in zip(record.names, again, own):
            if name is not None and name in self.got:
                local.append(error(stored_value(out), self.got[name], self.rtol, self.atol))
                carried.append(error(stored_value(ref), stored_value(out), self.rtol, self.atol))
        if not local:
            return entry
        worst = lambda errs: max(errs, key=lambda e: (not e.within, e.max_abs))  # noqa: E731
        return dataclasses.replace(entry, local=worst(local), carried=worst(carried))


def _is_literal(var: Any) -> bool:
    from jax._src import core as jax_core

    return isinstance(var, jax_core.Literal)


def bind(eqn: Any, ins: Sequence[Any]) -> list[Any]:
    """Evaluate one equation in JAX (eagerly, as ``jax.core.eval_jaxpr`` does)."""
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns: Sequence[Any] = ()
    if isinstance(params, tuple):  # JAX before 0.7: (subfuns, params)
        subfuns, params = params
    out = eqn.primitive.bind(*subfuns, *ins, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def _entered(eqn: Any, record: Record | None) -> tuple[Any, Sequence[Any]] | None:
    """The body to evaluate equation by equation: the one jaxpr the converter lowered
    inline for ``eqn``, when it computes ``eqn`` from ``eqn``'s own inputs (a ``jit``
    body, a ``custom_jvp`` function; not one step of a ``scan``)."""
    if record is None or len(record.inlined) != 1:
        return None
    body = record.inlined[0]
    for value in eqn.params.values():
        if getattr(value, "jaxpr", value) is not body:
            continue
        consts = getattr(value, "consts", ())
        if len(consts) != len(body.constvars):
            return None
        same_in = [v.aval for v in body.invars] == [v.aval for v in eqn.invars]
        same_out = [v.aval for v in body.outvars] == [v.aval for v in eqn.outvars]
        return (body, consts) if same_in and same_out else None
    return None


def _nodes(record: Record, producers: Mapping[str, Any]) -> tuple[str, ...]:
    """The nodes holding the record's outputs in the final graph, then the other nodes
    its rule emitted that are still there."""
    result: list[str] = []
    seen: set[int] = set()
    for name in record.names:
        producer = producers.get(name) if name is not None else None
        if producer is not None and id(producer) not in seen:
            seen.add(id(producer))
            result.append(f"{producer.op_type} {producer.name}")
    for node in record.nodes:
        if id(node) not in seen and node.graph is not None:
            seen.add(id(node))
            result.append(f"{node.op_type} {node.name}")
    return tuple(result[:8]) + (("...",) if len(result) > 8 else ())


def _note(record: Record, producers: Mapping[str, Any]) -> str:
    for name in record.names:
        producer = producers.get(name) if name is not None else None
        if producer is not None and producer.op_type in _BOUNDARY_OPS:
            return f"compared at the {producer.op_type} boundary: its body's values are not visible"
        if producer is not None and producer.domain not in ("", "ai.onnx"):
            return f"compared at the outputs of the ONNX function {producer.op_type}"
    return ""


def stored_value(x: Any) -> np.ndarray:
    from jax2onnx.checking.validation import stored

    return stored(x)


def _from_stored(array: np.ndarray, aval: Any) -> Any:
    """ONNX Runtime's value as JAX holds it (complex from its parts, keys from key data)."""
    import jax
    import jax.numpy as jnp

    from jax2onnx.values.keys import from_parts, is_complex, is_extended

    if is_extended(aval.dtype):
        return jax.random.wrap_key_data(jnp.asarray(array))
    if is_complex(aval.dtype):
        return jnp.asarray(from_parts(array, aval.dtype))
    return jnp.asarray(array, dtype=aval.dtype)


def _as_aval_dtype(x: Any, aval: Any) -> Any:
    import jax.numpy as jnp

    from jax2onnx.values.keys import is_extended

    if is_extended(getattr(x, "dtype", None)) or is_extended(aval.dtype):
        return x
    return jnp.asarray(x, dtype=aval.dtype)


def _compare_outputs(result, walk: _Walk, got, kwargs, rtol, atol) -> dict[str, Error]:
    from jax2onnx.checking.validation import _selected, _to_channels_last

    outputs = {}
    for i, (value, out) in enumerate(zip(result.model.graph.outputs, walk.outs)):
        if value.name not in got:
            continue
        have = got[value.name]
        if _selected(kwargs.get("outputs_as_nchw"), i, value.name):
            have = _to_channels_last(have)
        outputs[value.name] = error(stored_value(out), have, rtol, atol)
    return outputs


class _Progress:
    """A one-line progress bar on standard error."""

    def __init__(self, total: int) -> None:
        self.total, self.count = max(total, 1), 0

    def step(self) -> None:
        self.count += 1
        if self.count % 16 == 0 or self.count == self.total:
            filled = int(30 * self.count / self.total)
            sys.stderr.write(
                f"\rverify [{'#' * filled}{'.' * (30 - filled)}] {self.count}/{self.total}"
            )
            sys.stderr.flush()

    def done(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()
