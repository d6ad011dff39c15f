"""``FoldConstantsPass``: nodes of initializers computed at conversion time (same bits)."""

from __future__ import annotations

import math

import numpy as np

from jax2onnx.passes.bodies import nested_graphs
from jax2onnx.values.dtypes import exact_cast
from jax2onnx.values.ir import ir

_FLOATS = frozenset((np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)))
_INTS = frozenset(
    np.dtype(t) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
) | {np.dtype(bool)}


def _fold_reshape(node, data, shape):
    allow_zero = node.attributes.get("allowzero")
    target = [int(d) for d in shape]
    if not (allow_zero is not None and allow_zero.as_int()):
        target = [data.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return data.reshape(target)


def _axes(node, given):
    if given is not None:
        return [int(a) for a in given]
    attr = node.attributes.get("axes")
    return None if attr is None else list(attr.as_ints())


def _fold_unsqueeze(node, data, axes=None):
    axes = _axes(node, axes)
    rank = data.ndim + len(axes)
    return data.reshape(_unsqueezed(data.shape, sorted(a % rank for a in axes)))


def _unsqueezed(shape, axes):
    shape = list(shape)
    for axis in axes:
        shape.insert(axis, 1)
    return shape


def _fold_squeeze(node, data, axes=None):
    axes = _axes(node, axes)
    return np.squeeze(data, axis=None if axes is None else tuple(axes))


def _fold_transpose(node, data):
    perm = node.attributes.get("perm")
    return np.transpose(data, None if perm is None else list(perm.as_ints()))


def _fold_cast(node, data):
    target = ir.DataType(node.attributes["to"].as_int())
    if target == ir.DataType.BFLOAT16:
        return None
    return exact_cast(data, target.numpy())


def _arith(fn, *, integers: bool):
    """Elementwise arithmetic; integers wrap in NumPy as in ONNX Runtime."""
    kinds = _FLOATS | _INTS if integers else _FLOATS

    def fold(node, *arrays):
        if any(a.dtype not in kinds for a in arrays) or len({a.dtype for a in arrays}) != 1:
            return None
        with np.errstate(all="ignore"):
            return np.asarray(fn(*arrays), dtype=arrays[0].dtype)

    return fold


def _fold_clip(node, data, low=None, high=None):
    if any(b is not None and b.dtype != data.dtype for b in (low, high)):
        return None
    if data.dtype not in _FLOATS | _INTS:
        return None
    out = data
    if low is not None:
        out = np.where(out < low, low, out)
    if high is not None:
        out = np.where(out > high, high, out)
    return np.asarray(out, dtype=data.dtype)


def _fold_where(node, condition, x, y):
    if condition.dtype != np.dtype(bool) or x.dtype != y.dtype:
        return None
    return np.where(condition, x, y)


def _fold_gather(node, data, indices):
    axis = node.attributes.get("axis")
    axis = 0 if axis is None else axis.as_int()
    size = data.shape[axis]
    if indices.dtype.kind not in "iu" or np.any(indices >= size) or np.any(indices < -size):
        return None  # ONNX Runtime rejects out-of-range indices at run time; keep that
    return np.take(data, indices.astype(np.int64), axis=axis)


def _compare(fn):
    def fold(node, a, b):
        if a.dtype != b.dtype:
            return None
        return fn(a, b)

    return fold


def _logical(fn):
    def fold(node, *arrays):
        if any(a.dtype != np.dtype(bool) for a in arrays):
            return None
        return fn(*arrays)

    return fold


def _fold_slice(node, data, starts, ends, axes=None, steps=None):
    rank = data.ndim
    axes = range(len(starts)) if axes is None else [int(a) % rank for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    index = [slice(None)] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        # ONNX clamps the bounds to the axis as Python's slices do (int64 extremes included)
        size = data.shape[axis]
        index[axis] = slice(
            int(np.clip(start, -size - 1, size)), int(np.clip(end, -size - 1, size)), step
        )
    return data[tuple(index)]


def _fold_concat(node, *arrays):
    if len({a.dtype for a in arrays}) != 1:
        return None
    return np.concatenate(arrays, axis=node.attributes["axis"].as_int())


def _fold_expand(node, data, shape):
    target = np.broadcast_shapes(data.shape, tuple(int(d) for d in shape))
    return np.broadcast_to(data, target)


def _fold_mod(node, a, b):
    fmod = node.attributes.get("fmod")
    if a.dtype != b.dtype or a.dtype.kind not in "iu" or np.any(b == 0):
        return None  # float remainders and division by zero are left to the runtime
    if fmod is not None and fmod.as_int():
        return np.fmod(a, b)
    return np.mod(a, b)


def _fold_extremum(fn):
    def fold(node, *arrays):
        if len({a.dtype for a in arrays}) != 1 or arrays[0].dtype not in _FLOATS | _INTS:
            return None
        if arrays[0].dtype in _FLOATS and any(np.isnan(a).any() for a in arrays):
            return None  # NaN handling differs between runtimes: left to the runtime
        out = arrays[0]
        for a in arrays[1:]:
            out = fn(out, a)
        return out

    return fold


def _fold_gather_elements(node, data, indices):
    axis = node.attributes.get("axis")
    axis = 0 if axis is None else axis.as_int() % data.ndim
    size = data.shape[axis]
    if indices.dtype.kind not in "iu" or np.any(indices >= size) or np.any(indices < -size):
        return None
    return np.take_along_axis(data, np.where(indices < 0, indices + size, indices), axis=axis)


_REDUCTIONS = {
    "none": None,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _fold_scatter_nd(node, data, indices, updates):
    reduction = node.attributes.get("reduction")
    combine = _REDUCTIONS.get("none" if reduction is None else reduction.as_string(), False)
    if combine is False:
        return None
    if combine is not None and data.dtype.kind == "f":
        if np.isnan(data).any() or np.isnan(updates).any():
            return None  # NaN extrema and products are left to the runtime
    depth = indices.shape[-1]
    flat = indices.reshape(-1, depth).astype(np.int64)
    bounds = np.asarray(data.shape[:depth])
    if np.any(flat >= bounds) or np.any(flat < -bounds):
        return None
    flat = np.where(flat < 0, flat + bounds, flat)
    if len({tuple(i) for i in flat}) != len(flat):
        return None  # repeated indices: ONNX leaves the order open
    out = np.array(data, copy=True)
    rows = updates.reshape(len(flat), *data.shape[depth:])
    with np.errstate(all="ignore"):  # integers wrap, as in the runtime
        for index, row in zip(flat, rows, strict=True):
            out[tuple(index)] = row if combine is None else combine(out[tuple(index)], row)
    return out


def _fold_pad(node, data, pads, value=None, axes=None):
    mode = node.attributes.get("mode")
    if mode is not None and mode.as_string() != "constant" or np.any(pads < 0):
        return None
    rank = data.ndim
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    widths = [(0, 0)] * rank
    for k, axis in enumerate(axes):
        widths[axis] = (int(pads[k]), int(pads[k + len(axes)]))
    fill = 0 if value is None or value.size == 0 else value.reshape(-1)[0]
    return np.pad(data, widths, constant_values=fill)


def _fold_power(node, base, exponent):
    """``Pow(x, 2)`` (one correctly rounded product in NumPy and in the runtime) and
    ``Pow(x, 1)`` (``x``); other powers are left to the runtime."""
    if base.dtype.kind != "f" or exponent.size == 0:
        return None
    shape = np.broadcast_shapes(base.shape, exponent.shape)
    if np.all(exponent == 1):
        return np.broadcast_to(base, shape)
    if np.all(exponent == 2):
        return np.broadcast_to(base * base, shape)
    return None


def _fold_tile(node, data, repeats):
    return np.tile(data, [int(r) for r in repeats])


def _fold_integer_cumsum(node, data, axis):
    """Integer running sums (exact, wrapping as in the runtime); float ones depend on the
    order of additions and are left to the runtime."""
    if data.dtype.kind not in "iu" or data.ndim == 0:
        return None
    axis = int(axis.reshape(-1)[0]) % data.ndim
    if node.attributes.get_int("reverse", 0):
        data = np.flip(data, axis)
    with np.errstate(all="ignore"):
        out = np.cumsum(data, axis=axis, dtype=data.dtype)
    if node.attributes.get_int("exclusive", 0):
        out = out - data
    return np.flip(out, axis) if node.attributes.get_int("reverse", 0) else out


def _fold_top_k(node, data, k):
    """Sorted ``TopK``: ties go to the lower index, as ONNX specifies; both outputs."""
    if not node.attributes.get_int("sorted", 1) or data.ndim == 0:
        return None
    if data.dtype.kind not in "fiu" or (data.dtype.kind == "f" and np.isnan(data).any()):
        return None  # NaN's place in the order is the runtime's
    axis = node.attributes.get_int("axis", -1) % data.ndim
    count = int(k.reshape(-1)[0])
    if not 0 <= count <= data.shape[axis]:
        return None
    if node.attributes.get_int("largest", 1):
        # a stable ascending sort of the reversed axis, read backwards: largest first,
        # equal values in ascending index order
        size = data.shape[axis]
        order = size - 1 - np.flip(np.argsort(np.flip(data, axis), axis, kind="stable"), axis)
    else:
        order = np.argsort(data, axis, kind="stable")
    order = np.take(order, np.arange(count), axis=axis)
    return np.take_along_axis(data, order, axis=axis), order.astype(np.int64)


def _reduced_axes(node, data, axes):
    """``(axes, keepdims, terms)`` of a reduction (``axes`` None: all of them), or None
    when the reduction is a no-op (empty axes with ``noop_with_empty_axes``)."""
    keep = node.attributes.get("keepdims")
    keep = True if keep is None else bool(keep.as_int())
    if axes is None and "axes" in node.attributes:  # before opset 18: an attribute
        axes = np.asarray(node.attributes["axes"].as_ints(), np.int64)
    if axes is None or axes.size == 0:
        noop = node.attributes.get("noop_with_empty_axes")
        if noop is not None and noop.as_int():
            return None
        axes = None
    else:
        axes = tuple(int(a) % data.ndim for a in axes)
    terms = data.size if axes is None else int(np.prod([data.shape[a] for a in axes]))
    return axes, keep, terms


def _fold_integer_sum(node, data, axes=None):
    reduced = _reduced_axes(node, data, axes)
    if reduced is None:
        return data
    axes, keep, terms = reduced
    if data.dtype.kind not in "iu" and terms > 1:
        return None  # a float sum of several terms depends on the order of additions
    return np.sum(data, axis=axes, keepdims=keep, dtype=data.dtype)


def _fold_extreme(fn):
    """``ReduceMax``/``ReduceMin`` of integers, booleans (any/all) and floats without NaN
    (whose handling differs between runtimes) or zeros of both signs (which of ``-0.0``
    and ``0.0`` wins is the runtime's); never of an empty set (the runtimes disagree)."""

    def fold(node, data, axes=None):
        reduced = _reduced_axes(node, data, axes)
        if reduced is None:
            return data
        axes, keep, terms = reduced
        if terms == 0 or data.dtype not in _FLOATS | _INTS:
            return None
        if data.dtype in _FLOATS:
            signs = np.signbit(data[data == 0])
            if np.isnan(data).any() or (signs.any() and not signs.all()):
                return None
        return fn(data, axis=axes, keepdims=keep)

    return fold


def _fold_is_nan(node, data):
    return np.isnan(data) if data.dtype in _FLOATS else None


def _fold_is_inf(node, data):
    if data.dtype not in _FLOATS:
        return None
    negative = bool(node.attributes.get_int("detect_negative", 1))
    positive = bool(node.attributes.get_int("detect_positive", 1))
    return np.isinf(data) & (((data < 0) & negative) | ((data > 0) & positive))


_WIDER = {  # the float type a contraction of constants is computed in, rounded once
    np.dtype(np.float16): np.dtype(np.float64),
    np.dtype(np.float32): np.dtype(np.float64),
    np.dtype(np.float64): np.dtype(np.longdouble),
}
_OPERAND_LIMIT = 4096  # elements of each operand of a folded contraction
_RESULT_LIMIT = 256  # elements of its result


def _contraction(fn, *, integers: bool = True):
    """A small product of constants (MatMul, Gemm, Einsum), computed at conversion.

    Not bit-identical to ONNX Runtime, which sums in its own order and in the
    operands' type: floats are computed in a wider type (float64 for float16
    and float32) and rounded once, so the folded value is at least as accurate
    as the runtime's, and within any tolerance of the dtype. Integers are
    computed exactly (Python integers) and folded only when the result fits
    the type, where the runtime's product is exact too. The result's shape must
    be known and small, so a large product is never computed.
    """

    def fold(node, *arrays):
        arrays = [a for a in arrays if a is not None]
        if len({a.dtype for a in arrays}) != 1 or any(a.size > _OPERAND_LIMIT for a in arrays):
            return None
        shape = node.outputs[0].shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        if math.prod(shape) > _RESULT_LIMIT:
            return None
        dtype = arrays[0].dtype
        if dtype in _WIDER:
            with np.errstate(all="ignore"):
                out = np.asarray(fn(node, *(a.astype(_WIDER[dtype]) for a in arrays)))
            return out.astype(dtype)
        if not integers or dtype.kind not in "iu" or dtype.itemsize < 4:
            return None  # ONNX Runtime has no kernel for narrower integers
        out = np.asarray(fn(node, *(a.astype(object) for a in arrays)))
        info = np.iinfo(dtype)
        if out.size and (min(out.flat) < info.min or max(out.flat) > info.max):
            return None  # would wrap around: left to the runtime
        return out.astype(dtype)

    return fold


def _matmul(node, a, b):
    return np.matmul(a, b)


def _gemm(node, a, b, c=None):
    def attribute(name, default):
        found = node.attributes.get(name)
        return default if found is None else found.value

    if attribute("transA", 0):
        a = a.T
    if attribute("transB", 0):
        b = b.T
    out = np.matmul(a, b) * a.dtype.type(attribute("alpha", 1.0))
    if c is not None:
        out = out + c * c.dtype.type(attribute("beta", 1.0))
    return out


def _einsum(node, *operands):
    return np.einsum(node.attributes["equation"].as_string(), *operands)


_FOLDERS = {
    "MatMul": _contraction(_matmul),
    "Gemm": _contraction(_gemm, integers=False),
    "Einsum": _contraction(_einsum),
    "Slice": _fold_slice,
    "Concat": _fold_concat,
    "Expand": _fold_expand,
    "Mod": _fold_mod,
    "Max": _fold_extremum(np.maximum),
    "Min": _fold_extremum(np.minimum),
    "Abs": _arith(np.abs, integers=True),
    "Sign": _arith(np.sign, integers=True),
    "GatherElements": _fold_gather_elements,
    "ScatterND": _fold_scatter_nd,
    "ReduceSum": _fold_integer_sum,
    "ReduceMax": _fold_extreme(np.max),
    "ReduceMin": _fold_extreme(np.min),
    "IsNaN": _fold_is_nan,
    "IsInf": _fold_is_inf,
    "Pad": _fold_pad,
    "Pow": _fold_power,
    "Tile": _fold_tile,
    "CumSum": _fold_integer_cumsum,
    "TopK": _fold_top_k,
    "Less": _compare(np.less),
    "LessOrEqual": _compare(np.less_equal),
    "Greater": _compare(np.greater),
    "GreaterOrEqual": _compare(np.greater_equal),
    "Equal": _compare(np.equal),
    "And": _logical(np.logical_and),
    "Or": _logical(np.logical_or),
    "Not": _logical(np.logical_not),
    "Where": _fold_where,
    "Gather": _fold_gather,
    "Reshape": _fold_reshape,
    "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze,
    "Transpose": _fold_transpose,
    "Cast": _fold_cast,
    "Add": _arith(np.add, integers=True),
    "Sub": _arith(np.subtract, integers=True),
    "Mul": _arith(np.multiply, integers=True),
    "Neg": _arith(np.negative, integers=True),
    "Div": _arith(np.divide, integers=False),
    "Sqrt": _arith(np.sqrt, integers=False),
    "Reciprocal": _arith(np.reciprocal, integers=False),
    "Clip": _fold_clip,
}


_OPTIONAL_INPUTS = frozenset(
    {"Unsqueeze", "Squeeze", "Clip", "Slice", "ReduceSum", "ReduceMax", "ReduceMin", "Gemm", "Pad"}
)
_SMALL = 256  # elements a folded result may have beyond its largest input (a Concat of scalars)


def foldable(node: ir.Node) -> bool:
    """Whether this pass can evaluate ``node``'s op at all (see :func:`evaluate`)."""
    return node.op_type in _FOLDERS and node.domain in ("", "ai.onnx")


def evaluate(node: ir.Node, arrays: list) -> tuple | None:
    """``node`` (an ONNX op) on the given arrays (None: an omitted optional input), as
    this pass folds it: a tuple of its results, or None when the pass leaves it to the
    runtime."""
    fold = _FOLDERS.get(node.op_type)
    if fold is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type not in _OPTIONAL_INPUTS and any(a is None for a in arrays):
        return None
    results = fold(node, *arrays)
    if results is None:
        return None
    return results if isinstance(results, tuple) else (results,)


class FoldConstantsPass(ir.passes.InPlacePass):
    """Replace a node whose inputs are all initializers by an initializer of its result.

    Only for layout ops and correctly rounded float arithmetic (IEEE ``+ - * /
    sqrt`` give the same bits in NumPy and ONNX Runtime), integer sums and
    remainders, and only when the result is no larger than its largest input
    or than ``_SMALL`` elements, so folding never grows the model by more than
    bookkeeping (a broadcasting ``Add`` that would expand a constant stays).
    Sorted ``TopK`` (both outputs; ties to the lower index as ONNX specifies),
    integer ``CumSum``, ``Tile``, ``Pow`` by 1 or 2, ``IsNaN``, ``IsInf`` and
    ``ReduceMax``/``ReduceMin`` (not of NaN or of zeros of both signs) fold too. One exception
    to the same bits: small products of constants (``MatMul``,
    ``Gemm``, ``Einsum`` of a model's fixed matrices, as a physics engine's
    kinematics of constant frames computes them) are computed more accurately
    than the runtime would, see :func:`_contraction`.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in [model.graph, *nested_graphs(model.graph)]:
            modified |= self._fold(graph, model.graph)
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _fold(graph: ir.Graph, root: ir.Graph) -> bool:
        """Fold ``graph``'s nodes; results become initializers of ``root`` (a Loop or If
        body reads them from the enclosing scope, as it reads the initializers it folds)."""
        outputs = {id(v) for v in graph.outputs}
        modified = False
        for node in list(graph):
            fold = _FOLDERS.get(node.op_type)
            if fold is None or node.domain not in ("", "ai.onnx"):
                continue
            if not node.inputs or any(
                v is not None and (v.const_value is None or v.is_graph_input()) for v in node.inputs
            ):
                continue
            arrays = [None if v is None else v.const_value.numpy() for v in node.inputs]
            if node.op_type not in _OPTIONAL_INPUTS and any(a is None for a in arrays):
                continue
            results = fold(node, *arrays)
            if results is None:
                continue
            results = results if isinstance(results, tuple) else (results,)
            if len(results) != len(node.outputs) or any(id(v) in outputs for v in node.outputs):
                continue
            largest = max(_SMALL, *(a.size for a in arrays if a is not None))
            if any(r.size > largest for r in results):
                continue
            for old, result in zip(node.outputs, results, strict=True):
                new = ir.Value(
                    name=old.name,
                    type=ir.TensorType(ir.DataType.from_numpy(result.dtype)),
                    shape=ir.Shape(result.shape),
                    const_value=ir.Tensor(np.asarray(result, order="C"), name=old.name),
                )
                ir.convenience.replace_all_uses_with(old, new)
                root.register_initializer(new)
            graph.remove(node, safe=True)
            modified = True
        return modified
