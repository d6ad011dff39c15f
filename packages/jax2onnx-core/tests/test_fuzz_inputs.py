"""Fuzzing ``to_onnx`` with mostly-invalid arguments: every failure is a documented error.

The property: a call either converts (a ``ModelProto``, an ``onnx_ir.Model``,
or a file ``onnx.load`` reads), or raises

- the user's own error, raised by the user's function (``RuntimeError("user")``,
  or ``x + 1`` on a dict input), when every argument was valid;
- ``TypeError``/``ValueError`` from JAX rejecting the user's function on valid
  specs (``x * y`` on shapes (2,) and (3,)): its traceback passes through the
  function;
- a ``Jax2OnnxError`` (a conversion problem) when every argument was valid;
- otherwise a ``TypeError``/``ValueError`` whose message names one of the
  arguments the generator made invalid; an invalid argument is rejected
  before the user's function runs (output names excepted: their count is
  known only after tracing).

An internal error (``AttributeError``, ``KeyError`` ... raised anywhere but
in the user's own code) fails the property, and so does a converted call
with an invalid argument. With ``return_mode="file"`` a failure leaves the
output directory as it was (no file, no ``.data``, no temporary file).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jax2onnx
from jax2onnx import to_onnx
from jax2onnx.plugin import Jax2OnnxError
from jax2onnx.values.ir import ir

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,  # nothing written into the checkout
)

INTERNAL = (
    AttributeError,
    LookupError,  # KeyError, IndexError
    NameError,  # UnboundLocalError
    ArithmeticError,  # ZeroDivisionError, OverflowError
    AssertionError,
    RecursionError,
)
ARGUMENTS = (
    "fn",
    "inputs",
    "input_params",
    "model_name",
    "opset",
    "return_mode",
    "output_path",
    "input_names",
    "output_names",
)


# -- the functions --------------------------------------------------------------------


def _user_error(x):
    raise RuntimeError("user")


def _with_params(x, **params):
    return x + sum(params.values())


@dataclasses.dataclass(frozen=True)
class Fn:
    """A function to convert and what a valid call of it looks like."""

    name: str
    fn: Any
    arity: int
    outputs: tuple[str, ...]  # default output names when it converts
    keywords: frozenset[str] | None = frozenset()  # None: any identifier (``**params``)

    def __repr__(self) -> str:
        return self.name


FUNCTIONS = [
    Fn("x + 1", lambda x: x + 1, 1, ("out_0",)),
    Fn("x * y", lambda x, y: x * y, 2, ("out_0",)),
    Fn("x.sum()", lambda x: x.sum(), 1, ("out_0",)),
    Fn("jnp.tanh", jnp.tanh, 1, ("out_0",)),
    Fn("dict", lambda x: {"a": x + 1, "b": x * 2}, 1, ("a", "b")),
    Fn("pair", lambda x, y: (x - 1, y + 1), 2, ("out_0", "out_1")),
    Fn("scaled", lambda x, *, scale=1.0: x * scale, 1, ("out_0",), frozenset({"scale"})),
    Fn("**params", _with_params, 1, ("out_0",), None),
    Fn("raises", _user_error, 1, ("out_0",)),
]
NOT_CALLABLE = Fn("42", 42, 1, ("out_0",))


def _user_codes(fn: Any) -> set[Any]:
    try:
        return {inspect.unwrap(fn).__code__}
    except AttributeError:
        return set()


# -- argument strategies: (value, valid) ----------------------------------------------------


class Duck:
    """Something with a ``shape`` and a ``dtype`` (a spec by duck typing)."""

    def __init__(self, shape: Any, dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype

    def __repr__(self) -> str:
        return f"Duck({self.shape!r}, {self.dtype!r})"


class Opaque:
    def __repr__(self) -> str:
        return "Opaque()"


def _tagged(valid: list[Any], invalid: list[Any]) -> st.SearchStrategy[tuple[Any, bool]]:
    """``(value, is_valid)``, a valid value two times out of three."""
    good = st.sampled_from([(v, True) for v in valid]) if valid else st.nothing()
    bad = st.sampled_from([(v, False) for v in invalid]) if invalid else st.nothing()
    return st.one_of(good, good, bad)


GOOD_DIMS = [0, 1, 2, 3, np.int64(2), 2**40, "B", "T", "2*B", " B ", "\u00e9\u00e8"]
BAD_DIMS = [
    -1,
    np.int32(-2),
    2**63,
    2**70,
    2.5,
    True,
    None,
    "",
    "2*",
    "B-",
    "-1",
    "a.b",
    b"B",
    Opaque(),
]
dims = _tagged(GOOD_DIMS, BAD_DIMS)


@st.composite
def shapes(draw: Any) -> tuple[Any, bool]:
    drawn = draw(st.lists(dims, max_size=3))
    shape = [d for d, _ in drawn]
    return (draw(st.sampled_from([tuple, list]))(shape), all(ok for _, ok in drawn))


GOOD_DTYPES = [
    np.bool_,
    np.int8,
    np.int32,
    np.int64,
    np.uint8,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    ">f4",
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.int4,
]
BAD_DTYPES = [
    object,
    np.str_,
    np.bytes_,
    "datetime64[s]",
    "timedelta64[s]",
    "V4",
    [("a", "f4")],
    np.longdouble,  # float128 on x86-64 Linux; no ONNX type
    ml_dtypes.float8_e3m4,
    ml_dtypes.int1,
]
if np.dtype(np.longdouble).itemsize == 8:  # platforms where long double is float64
    BAD_DTYPES.remove(np.longdouble)
    GOOD_DTYPES.append(np.longdouble)
dtypes = _tagged(GOOD_DTYPES, BAD_DTYPES)
small_int_shapes = st.lists(st.integers(0, 3), max_size=2).map(tuple)


@st.composite
def arrays(draw: Any) -> tuple[Any, bool]:
    dtype, ok = draw(dtypes)
    return np.zeros(draw(small_int_shapes), dtype), ok


@st.composite
def shape_dtype_structs(draw: Any) -> tuple[Any, bool]:
    dtype, ok = draw(_tagged(["float32", "int32", "bool", np.float16], [object, np.str_]))
    shape, shape_ok = draw(st.one_of(small_int_shapes.map(lambda s: (s, True)), shapes()))
    try:
        spec = jax.ShapeDtypeStruct(shape, dtype)
    except Exception:  # JAX refuses to build it: the same spec, duck-typed
        spec = Duck(shape, dtype)
    return spec, ok and shape_ok


ducks = _tagged(
    [Duck((2,), "float32"), Duck([3, "B"], "int32")],
    [
        Duck((2,), "bogus"),
        Duck((2,), None),
        Duck((2,), Opaque()),
        Duck(2, "float32"),
        Duck(None, "float32"),
        Duck("ab", "float32"),
    ],
)
symbolic_structs = _tagged(  # dims of their own jax.export scopes: "B" is still "B"
    [
        jax.ShapeDtypeStruct(jax.export.symbolic_shape("B, 3"), np.float32),
        jax.ShapeDtypeStruct(jax.export.symbolic_shape("2*T"), np.int32),
    ],
    [],
)
leaves = st.one_of(shapes(), arrays(), shape_dtype_structs(), ducks, symbolic_structs)
junk = _tagged([], [None, 3, 2.5, "x", Opaque(), {}, {1: (2,), "a": (2,)}, (None,)])


@st.composite
def pytrees(draw: Any) -> tuple[Any, bool]:
    kind = draw(st.sampled_from(["dict", "tuple", "list"]))
    if kind == "dict":
        keys = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=2, unique=True))
        drawn = {k: draw(leaves) for k in keys}
        return {k: v for k, (v, _) in drawn.items()}, all(ok for _, ok in drawn.values())
    drawn = draw(st.lists(leaves, min_size=1, max_size=2))
    items = [v for v, _ in drawn]
    return (tuple if kind == "tuple" else list)(items), all(ok for _, ok in drawn)


entries = st.one_of(leaves, leaves, leaves, pytrees(), junk)


def _is_plain(entry: Any) -> bool:
    """Mirror of the converter's rule: a spec, not a pytree of specs."""
    if isinstance(entry, (tuple, list)):
        return not any(
            isinstance(d, (tuple, list, dict))
            or (hasattr(d, "shape") and not isinstance(d, np.integer))
            for d in entry
        )
    return hasattr(entry, "shape") and hasattr(entry, "dtype")


def _leaf_paths(tree: Any) -> list[str]:
    if _is_plain(tree):
        return [""]
    if isinstance(tree, dict):
        items = sorted(tree.items())
    else:
        items = list(enumerate(tree))
    return [".".join(filter(None, [str(k), p])) for k, v in items for p in _leaf_paths(v)]


PARAM_KEYS = ["scale", "scale", "scale", "s", "x", "in_0", "class", "", "1a", 1, None]
GOOD_VALUES = [True, 2, 2.5, 1j, [1.0, 2.0], np.float32(2), np.ones(2, np.float32), 2**40]
BAD_VALUES = [
    "abc",
    None,
    {"a": 1.0},
    Opaque(),
    [1.0, [2.0]],
    np.array(["a"]),
    np.zeros(2, "datetime64[s]"),
    2**70,
    jax.ShapeDtypeStruct((2,), np.float32),
]
NAMES = ["x", "y", "a", "b", "in_0", "out_0", "scale", "", 3, None]


# -- one call ---------------------------------------------------------------------------


@dataclasses.dataclass
class Call:
    fn: Fn
    inputs: Any
    kwargs: dict[str, Any]
    bad: set[str]  # arguments to be rejected before the function is traced
    late_bad: set[str]  # arguments only checkable after tracing (output names)

    def __repr__(self) -> str:
        return f"to_onnx({self.fn!r}, {self.inputs!r}, **{self.kwargs!r})  bad={self.bad}"


def _names_valid(names: Any) -> bool:
    return isinstance(names, list) and all(isinstance(n, str) and n for n in names)


def _judge(
    fn: Fn, inputs: Any, input_ok: bool, kwargs: dict[str, Any], tmp: str
) -> tuple[set[str], set[str]]:
    """The arguments a correct ``to_onnx`` rejects before tracing, and after."""
    bad, late = set(), set()
    if not callable(fn.fn):
        bad.add("fn")
    if not input_ok:
        bad.add("inputs")
    sequence = isinstance(inputs, (list, tuple))
    if sequence and len(inputs) != fn.arity and callable(fn.fn):
        bad.add("inputs")
    params = kwargs.get("input_params")
    if params is not None:
        if not isinstance(params, dict):
            bad.add("input_params")
        else:
            for key, (_, ok) in params.items():
                accepted = fn.keywords is None or key in fn.keywords
                if not (isinstance(key, str) and key.isidentifier() and accepted and ok):
                    bad.add("input_params")
                if key == "x" and fn.keywords is None:  # ``x`` is the positional parameter
                    bad.add("input_params")
    in_names = kwargs.get("input_names")
    if in_names is not None and not (
        _names_valid(in_names) and sequence and len(in_names) <= len(inputs)
    ):
        bad.add("input_names")
    out_names = kwargs.get("output_names")
    if out_names is not None and not _names_valid(out_names):
        bad.add("output_names")
    model_name = kwargs.get("model_name", "jax_model")
    if not (isinstance(model_name, str) and model_name):
        bad.add("model_name")
    opset = kwargs.get("opset", 23)
    if isinstance(opset, bool) or not isinstance(opset, (int, np.integer)) or not 13 <= opset <= 26:
        bad.add("opset")
    mode = kwargs.get("return_mode", "proto")
    mode = mode.strip().lower() if isinstance(mode, str) else mode
    if mode not in ("proto", "ir", "file"):
        bad.add("return_mode")
    path = kwargs.get("output_path")
    good_paths = (os.path.join(tmp, "m.onnx"), os.path.join(tmp, "new", "dir", "m.onnx"))
    if mode == "file" and path not in good_paths:
        bad.add("output_path")
    if bad:
        return bad, late

    # every argument has the right type: the graph input names must be unique
    given = in_names or []
    arg_names = ["x", "y"]
    graph_inputs = []
    for i, entry in enumerate(inputs):
        if _is_plain(entry):
            graph_inputs.append(given[i] if i < len(given) else f"in_{i}")
        else:
            prefix = given[i] if i < len(given) else arg_names[i]
            graph_inputs += [f"{prefix}.{p}" for p in _leaf_paths(entry)]
    graph_inputs += list(params or {})
    if len(set(graph_inputs)) < len(graph_inputs):
        bad.update({"input_names", "input_params", "inputs"})
        return bad, late
    outputs = list(fn.outputs)
    if out_names is not None:
        if len(out_names) > len(outputs):
            late.add("output_names")
        outputs[: len(out_names)] = out_names
    if len(set(outputs)) < len(outputs) or set(outputs) & set(graph_inputs):
        late.update({"output_names", "input_names"})
    return bad, late


def _run(call: Call, tmp: str) -> None:
    before = sorted(os.walk(tmp))
    kwargs = dict(call.kwargs)
    if isinstance(kwargs.get("input_params"), dict):
        kwargs["input_params"] = {k: v for k, (v, _) in kwargs["input_params"].items()}
    try:
        result = to_onnx(call.fn.fn, call.inputs, **kwargs)
    except Exception as err:
        _check_failure(call, err)
        assert sorted(os.walk(tmp)) == before, f"{call}: a failed call wrote files"
        return
    assert not call.bad and not call.late_bad, f"{call}: converted invalid arguments"
    mode = kwargs.get("return_mode", "proto").strip().lower()
    if mode == "proto":
        assert isinstance(result, onnx.ModelProto)
    elif mode == "ir":
        assert isinstance(result, ir.Model)
    else:
        assert result == os.fspath(kwargs["output_path"])
        assert not os.path.exists(result + ".data")
        onnx.load(result)


def _check_failure(call: Call, err: BaseException) -> None:
    described = f"{call}\n raised {type(err).__name__}: {err}\n" + "".join(
        traceback.format_exception(err)
    )
    codes = _user_codes(call.fn.fn)
    chain, frames = [err], []
    while (chain[-1].__cause__ or chain[-1].__context__) and len(chain) < 20:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    for link in chain:
        frames += [frame.f_code for frame, _ in traceback.walk_tb(link.__traceback__)]
    innermost = [f.f_code for f, _ in traceback.walk_tb(err.__traceback__)][-1]
    through_user = bool(codes & set(frames))

    if innermost in codes:  # raised by the user's own code: theirs, unchanged
        assert not call.bad, f"the function ran although arguments were invalid: {described}"
        return
    assert not isinstance(err, INTERNAL), f"internal error: {described}"
    assert isinstance(err, (TypeError, ValueError, Jax2OnnxError)), f"undocumented: {described}"
    if call.bad:
        assert not isinstance(err, Jax2OnnxError), (
            f"invalid arguments reached conversion: {described}"
        )
        assert not through_user, f"the function ran although arguments were invalid: {described}"
        assert _names(err, call.bad), f"message does not name {sorted(call.bad)}: {described}"
        return
    if isinstance(err, Jax2OnnxError) or through_user:
        return  # a conversion problem, or JAX rejecting the user's function
    assert call.late_bad and _names(err, call.late_bad), f"valid call failed: {described}"


def _names(err: BaseException, arguments: set[str]) -> bool:
    return any(re.search(rf"\b{name}\b", str(err)) for name in arguments)


def _fuzz(draw: Any, tmp: str, *, fns: list[Fn], vary: set[str]) -> Call:
    fn = draw(st.sampled_from(fns))
    if "inputs" in vary:
        count = draw(st.sampled_from([fn.arity] * 3 + [0, 1, 2, 3]))
        drawn = draw(st.lists(entries, min_size=count, max_size=count))
        inputs, input_ok = [v for v, _ in drawn], all(ok for _, ok in drawn)
        container = draw(st.sampled_from(["list"] * 8 + ["tuple", "str", "none", "int", "array"]))
        if container == "tuple":
            inputs = tuple(inputs)
        elif container != "list":
            inputs = {"str": "x", "none": None, "int": 3, "array": np.zeros((2, 3))}[container]
            input_ok = False
    else:
        shape = draw(st.sampled_from([(2, 3), ("B", 3), (3,), ()]))
        inputs, input_ok = [shape] * fn.arity, True

    kwargs: dict[str, Any] = {}
    if "input_params" in vary and draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(PARAM_KEYS), max_size=2, unique=True))
        values = _tagged(GOOD_VALUES, BAD_VALUES)
        params = {k: draw(values) for k in keys}
        kwargs["input_params"] = draw(st.sampled_from([params] * 9 + [[1.0]]))
    if "opset" in vary and draw(st.booleans()):
        in_range = st.integers(13, 26)
        odd = [12, 27, 0, -1, 2**70, True, 23.0, "23", None, np.int64(23), np.int8(13)]
        kwargs["opset"] = draw(st.one_of(in_range, in_range, st.sampled_from(odd)))
    if "return_mode" in vary and draw(st.booleans()):
        kwargs["return_mode"] = draw(
            st.sampled_from(
                ["proto", "ir", "file", "file", "file", "PROTO", " File ", "onnx", "", None, 3]
            )
        )
    if "output_path" in vary:
        mode = kwargs.get("return_mode", "proto")
        wants_file = isinstance(mode, str) and mode.strip().lower() == "file"
        choices = {
            "file": os.path.join(tmp, "m.onnx"),
            "new dir": os.path.join(tmp, "new", "dir", "m.onnx"),
            "directory": tmp,
            "trailing separator": os.path.join(tmp, "x") + os.sep,
            "below a file": os.path.join(tmp, "existing.txt", "m.onnx"),
            "empty": "",
            "object": Opaque(),
            "int": 7,
            "bytes": os.fsencode(os.path.join(tmp, "b.onnx")),
            "none": None,
        }
        usual = ["file", "new dir"] if wants_file else ["none"]
        key = draw(st.sampled_from(usual * 4 + sorted(choices)))
        if choices[key] is not None:
            kwargs["output_path"] = choices[key]
    for argument in ("input_names", "output_names"):
        if argument in vary and draw(st.booleans()):
            names = st.lists(st.sampled_from(NAMES), max_size=3)
            kwargs[argument] = draw(st.one_of(names, names, st.sampled_from(["x", 3, {"x": 1}])))
    if "model_name" in vary and draw(st.booleans()):
        kwargs["model_name"] = draw(st.sampled_from(["m", "ünï côde", "", None, 3]))
    if "fn" in vary and draw(st.integers(0, 19)) == 0:
        fn = NOT_CALLABLE
    bad, late = _judge(fn, inputs, input_ok, kwargs, tmp)
    return Call(fn, inputs, kwargs, bad, late)


def _tmp() -> tempfile.TemporaryDirectory[str]:
    tmp = tempfile.TemporaryDirectory(prefix="j2o-fuzz-")
    with open(os.path.join(tmp.name, "existing.txt"), "w") as out:
        out.write("not a directory")
    return tmp


def _property(data: Any, fns: list[Fn], vary: set[str]) -> None:
    with _tmp() as tmp:
        call = _fuzz(data.draw, tmp, fns=fns, vary=vary)
        _run(call, tmp)


# -- the properties ----------------------------------------------------------------------


@FUZZ
@given(st.data())
def test_fuzz_input_specs(data):
    _property(data, FUNCTIONS, {"inputs"})


@FUZZ
@given(st.data())
def test_fuzz_input_params_and_names(data):
    fns = [f for f in FUNCTIONS if f.name in ("scaled", "**params", "x + 1", "dict", "x * y")]
    _property(data, fns, {"input_params", "input_names", "output_names"})


@FUZZ
@given(st.data())
def test_fuzz_options(data):
    _property(
        data,
        FUNCTIONS,
        {"opset", "return_mode", "output_path", "model_name"},
    )


@FUZZ
@given(st.data())
def test_fuzz_everything(data):
    _property(data, FUNCTIONS, set(ARGUMENTS))


# -- regressions: what the fuzzing found ---------------------------------------------------


def _bad(error: type[Exception], pattern: str, fn: Callable[..., Any] = lambda x: x + 1, **kw):
    inputs = kw.pop("inputs", [(2,)])
    with pytest.raises(error, match=pattern):
        to_onnx(fn, inputs, **kw)


@pytest.mark.parametrize(
    ("inputs", "error", "pattern"),
    [
        ([(np.int64(-1),)], ValueError, r"inputs\[0\], axis 0: dimension -1 is negative"),
        (
            [(2**63,)],
            ValueError,
            r"inputs\[0\], axis 0: dimension 9223372036854775808 does not fit",
        ),
        ([("-1",)], ValueError, r"inputs\[0\], axis 0: dimension -1 is negative"),
        ([np.array([object()])], TypeError, r"inputs\[0\]: dtype object is not supported"),
        ([np.array(["a"])], TypeError, r"inputs\[0\]: dtype <U1 is not supported"),
        ([np.zeros(2, "datetime64[s]")], TypeError, r"inputs\[0\]: dtype datetime64\[s\] is not"),
        ([np.zeros(2, "V4")], TypeError, r"inputs\[0\]: dtype \|V4 has no ONNX equivalent"),
        ([np.zeros(2, ml_dtypes.float8_e3m4)], TypeError, r"inputs\[0\]: dtype float8_e3m4 has no"),
        (
            [jax.ShapeDtypeStruct((2,), object)],
            TypeError,
            r"inputs\[0\]: dtype object is not supported",
        ),
        ([Duck((2,), "bogus")], TypeError, r"inputs\[0\]: dtype 'bogus' is not a NumPy dtype"),
        ([Duck((2,), None)], TypeError, r"inputs\[0\]: dtype None is not a dtype"),
        ([Duck(2, "float32")], TypeError, r"inputs\[0\]: shape 2 \(int\) is not a sequence"),
        ([Duck("ab", "float32")], TypeError, r"inputs\[0\]: shape 'ab' \(str\) is not a sequence"),
        ([{1: (2,), "a": (2,)}], TypeError, r"inputs\[0\] is not a pytree JAX can flatten"),
        ([2.5], TypeError, r"inputs\[0\] is float;"),
        (3, TypeError, r"inputs must be a list .* got int; for one input of a given shape"),
    ],
)
def test_bad_input_specs(inputs, error, pattern):
    _bad(error, pattern, inputs=inputs)


def test_symbolic_dims_of_another_scope_are_the_same_dims():
    b = jax.ShapeDtypeStruct(jax.export.symbolic_shape("B"), np.float32)
    model = to_onnx(lambda x, y: x * y, [b, ("B",)])  # was: incompatible shapes (B,), (B,)
    assert [i.type.tensor_type.shape.dim[0].dim_param for i in model.graph.input] == ["B", "B"]
    constrained = jax.export.symbolic_shape("B", scope=jax.export.SymbolicScope(["B >= 4"]))
    to_onnx(lambda x, y: x[:3] * y[:3], [jax.ShapeDtypeStruct(constrained, np.float32), ("B",)])
    with pytest.raises(ValueError, match=r"inputs\[1\], axis 0: symbolic dimension B belongs"):
        to_onnx(lambda x, y: x, [("B",), jax.ShapeDtypeStruct(constrained, np.float32)])


def test_numpy_integer_dims_make_a_shape():
    model = to_onnx(lambda x: x + 1, [(np.int64(2), 3)])
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [2, 3]


def test_big_endian_arrays_convert():
    model = to_onnx(lambda x: x + 1, [np.zeros((2,), ">f4")])
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


@pytest.mark.parametrize(
    ("fn", "inputs", "params", "pattern"),
    [
        (lambda x: x, [(2,), (2,)], None, r"inputs has 2 entries but fn .*<lambda>\(x\) takes 1"),
        (lambda x, y: x, [(2,)], None, r"inputs has 1 entries .* also needs \['y'\]"),
        (lambda x: x, [(2,)], {"s": 1.0}, r"input_params\['s'\]: fn .* has no keyword parameter"),
        (lambda x, **k: x, [(2,)], {"x": 1.0}, r"input_params\['x'\]: .* already gets 'x' from"),
    ],
)
def test_inputs_must_fit_the_signature(fn, inputs, params, pattern):
    _bad(ValueError, pattern, fn, inputs=inputs, input_params=params)


def test_wrapped_functions_are_checked_against_the_wrapper():
    import functools

    def f(x, w):
        return x * w

    @functools.wraps(f)
    def one_argument(x):
        return f(x, 2.0)

    assert isinstance(to_onnx(one_argument, [(2,)]), onnx.ModelProto)


@pytest.mark.parametrize(
    ("value", "error", "pattern"),
    [
        ("abc", TypeError, r"input_params\['s'\]: dtype <U3 is not supported"),
        (np.array(["a"]), TypeError, r"input_params\['s'\]: dtype <U1 is not supported"),
        ([1.0, [2.0]], TypeError, r"input_params\['s'\] is not a number, bool or array: setting"),
        (2**70, ValueError, r"input_params\['s'\] = 1180591620717411303424 does not fit in int64"),
    ],
)
def test_bad_input_params(value, error, pattern):
    _bad(error, pattern, lambda x, s: x * s, input_params={"s": value})


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"opset": True}, TypeError, r"opset must be an int, got True \(bool\)"),
        ({"opset": 23.0}, TypeError, r"opset must be an int, got 23.0 \(float\)"),
        ({"return_mode": None}, TypeError, r"return_mode must be a string"),
        ({"return_mode": 3}, TypeError, r"return_mode must be a string"),
        ({"input_names": "x"}, TypeError, r"input_names must be a list of strings .* got str"),
        ({"input_names": 3}, TypeError, r"input_names must be a list of strings .* got int"),
        ({"output_names": "y"}, TypeError, r"output_names must be a list of strings .* got str"),
        ({"output_names": [3]}, TypeError, r"output_names\[0\] must be a non-empty string"),
        ({"enable_double_precision": "yes"}, TypeError, r"enable_double_precision must be a bool"),
        ({"inputs_as_nchw": "in_0"}, TypeError, r"inputs_as_nchw must be a list of graph inputs"),
        ({"outputs_as_nchw": 0}, TypeError, r"outputs_as_nchw must be a list of graph outputs"),
        ({"extra_rules": 3}, TypeError, r"extra_rules must be a jax2onnx.plugin.Rules or a list"),
        ({"record_primitive_calls_file": 3}, TypeError, r"record_primitive_calls_file must be"),
    ],
)
def test_bad_options(kwargs, error, pattern):
    _bad(error, pattern, **kwargs)


def test_output_path_is_ignored_without_file_mode(tmp_path):
    """As in jax2onnx 0.17: output_path only matters with return_mode='file'."""
    target = tmp_path / "unused.onnx"
    model = to_onnx(lambda x: x + 1, [(2,)], output_path=target, external_data=True)
    assert model.graph.node and not target.exists()


def test_numpy_integer_opset_is_accepted():
    model = to_onnx(lambda x: x + 1, [(2,)], opset=np.int64(21))
    assert model.opset_import[0].version == 21


def test_output_name_clash_names_the_arguments():
    with pytest.raises(ValueError, match=r"output names must be unique.*set output_names"):
        to_onnx(lambda x: (x, x + 1), [(2,)], output_names=["out_1"])


@pytest.mark.parametrize(
    ("where", "error", "pattern"),
    [
        ("directory", ValueError, r"output_path '.*' is a directory"),
        ("trailing separator", ValueError, r"output_path '.*' is a directory"),
        ("below a file", ValueError, r"output_path '.*existing.txt' exists and is not a dir"),
        ("empty", ValueError, r"output_path '' is not a file path"),
        ("nul", ValueError, r"output_path .* is not a file path"),
        ("object", TypeError, r"output_path must be a str or os.PathLike, got Opaque"),
        ("bytes", TypeError, r"output_path must be a str path, got bytes"),
        ("external_data", TypeError, r"external_data must be True, False or None, got 'yes'"),
    ],
)
def test_bad_output_path_is_refused_before_converting(where, error, pattern):
    with _tmp() as tmp:
        path = {
            "directory": tmp,
            "trailing separator": os.path.join(tmp, "x") + os.sep,
            "below a file": os.path.join(tmp, "existing.txt", "m.onnx"),
            "empty": "",
            "nul": os.path.join(tmp, "a\0b.onnx"),
            "object": Opaque(),
            "bytes": os.fsencode(os.path.join(tmp, "m.onnx")),
            "external_data": os.path.join(tmp, "m.onnx"),
        }[where]
        extra = {"external_data": "yes"} if where == "external_data" else {}
        before = sorted(os.walk(tmp))
        traced = []
        with pytest.raises(error, match=pattern):
            to_onnx(
                lambda x: traced.append(x) or x,
                [(2,)],
                return_mode="file",
                output_path=path,
                **extra,
            )
        assert traced == []  # refused before tracing
        assert sorted(os.walk(tmp)) == before


def test_record_file_that_is_a_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match="record_primitive_calls_file .* is a directory"):
        to_onnx(lambda x: x + 1, [(2,)], record_primitive_calls_file=tmp_path)


def test_output_path_in_a_new_directory_is_written(tmp_path):
    target = tmp_path / "new" / "dir" / "m.onnx"
    assert to_onnx(lambda x: x + 1, [(2,)], return_mode="file", output_path=target) == str(target)
    onnx.load(target)


def test_documented_errors_are_in_the_docstring():
    doc = jax2onnx.to_onnx.__doc__
    assert "Raises:" in doc
    for name in ("TypeError", "ValueError", "Jax2OnnxError"):
        assert name in doc
