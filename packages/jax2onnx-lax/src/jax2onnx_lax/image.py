"""``jax.image.resize`` as the macro primitive ``lax.image.resize``.

``resize`` is linear in the image and separable: along each resized axis JAX
contracts the image with a weight matrix that depends only on the static
sizes, the method and ``antialias`` (``jax/_src/image/scale.py``). The
lowering therefore has two exact forms:

- **Resize** (opset >= 18, float32, NHWC: rank 4 with axes 0 and 3 kept), only
  where ONNX Runtime's Resize was verified to equal JAX: ``linear`` with
  ``half_pixel`` coordinates (antialias off, or no axis shrinking: ORT's
  antialiased linear filter differs from JAX's), and ``cubic`` with
  ``cubic_coeff_a=-0.5``, ``exclude_outside=1`` (JAX's Keys kernel with its
  border renormalisation), antialiased, or not antialiased when no axis
  shrinks (ORT rejects cubic NHWC downsampling without antialias).
- **MatMul** (every other method, dtype, layout and opset): JAX's own weight
  matrix for each resized axis, a constant computed at conversion time by
  resizing an identity matrix with the original function, then one MatMul per
  resized axis. ``nearest`` is a Gather with JAX's own indices (ORT's nearest
  rounds differently for some sizes, e.g. 100 -> 31).

Batching is explicit (the batch axis becomes one more kept axis); the JVP is
JAX's (resize is linear).
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.dims import is_symbolic
from jax2onnx.plugin import case
from jax2onnx_lax._rules import rules
from jax2onnx_lax._util import cast, i64

_resize = jax.image.resize  # the original, captured before the interception patches it
_Method = jax.image.ResizeMethod
_F32 = np.dtype(np.float32)


def _method(method) -> _Method:
    return _Method.from_string(method) if isinstance(method, str) else method


def _resize_batching(args, dims, *, shape, method, antialias, precision):
    """Batch axis to the front; it is one more axis the resize keeps."""
    from jax.interpreters import batching

    x = batching.bdim_at_front(args[0], dims[0], args[0].shape[dims[0]])
    new_shape = (x.shape[0], *shape)
    out = resize_p.bind(x, shape=new_shape, method=method, antialias=antialias, precision=precision)
    return out, 0


def _impl(image, *, shape, method, antialias, precision):
    return _resize(image, shape, method, antialias=antialias, precision=precision)


resize_p = rules.primitive("image.resize", impl=_impl, batching=_resize_batching, jvp="fallback")


def _binder(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        image, shape = a["image"], a["shape"]
        try:
            shape = tuple(shape)
            method = _method(a["method"])
            hash((shape, a["antialias"], a["precision"]))
        except (TypeError, ValueError):
            return original(*args, **kwargs)
        if not hasattr(image, "shape") or len(shape) != len(image.shape):
            return original(*args, **kwargs)
        for m, n in zip(image.shape, shape, strict=True):
            if (is_symbolic(m) or is_symbolic(n)) and not _same(m, n):
                return original(*args, **kwargs)  # only static axes are resized
        return resize_p.bind(
            jnp.asarray(image),
            shape=shape,
            method=method,
            antialias=bool(a["antialias"]),
            precision=a["precision"],
        )

    return call


rules.intercept("jax.image.resize", resize_p, binder=_binder)


def _resized_axes(ctx) -> list[tuple[int, int, int]]:
    """``(axis, in_size, out_size)`` for each axis whose size changes."""
    shape_in, shape_out = ctx.avals_in[0].shape, ctx.avals_out[0].shape
    return [
        (d, int(m), int(n))
        for d, (m, n) in enumerate(zip(shape_in, shape_out, strict=True))
        if not _same(m, n)
    ]


def _same(m, n) -> bool:
    if is_symbolic(m) or is_symbolic(n):
        return str(m) == str(n)
    return int(m) == int(n)


def _weights(m: int, n: int, dtype, method, antialias, precision) -> np.ndarray:
    """JAX's (m, n) weight matrix for one axis: the original resize of an identity."""
    eye = np.eye(m, dtype=dtype)
    return np.asarray(_resize(eye, (m, n), method, antialias=antialias, precision=precision))


def _nearest_indices(m: int, n: int) -> np.ndarray:
    """JAX's nearest-neighbour source indices (its float32 formula, run by JAX)."""
    idx = _resize(np.arange(m, dtype=np.float32), (n,), "nearest")  # compiled, as JAX runs it
    return np.asarray(idx).astype(np.int64)


def _resize_form(ctx, method, antialias) -> dict | None:
    """The Resize attributes where ORT's Resize equals JAX (see the module docstring)."""
    shape_in = ctx.avals_in[0].shape
    axes = _resized_axes(ctx)
    if np.dtype(ctx.avals_out[0].dtype) != _F32 or np.dtype(ctx.avals_in[0].dtype) != _F32:
        return None
    if len(shape_in) != 4 or not axes or any(d in (0, 3) for d, _, _ in axes):
        return None
    if any(m == 0 or n == 0 for _, m, n in axes):
        return None
    shrinks = any(n < m for _, m, n in axes)
    if method == _Method.LINEAR and (not antialias or not shrinks):
        attrs = dict(mode="linear")
    elif method == _Method.CUBIC and (antialias or not shrinks):
        attrs = dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
    else:
        return None
    return dict(attrs, coordinate_transformation_mode="half_pixel", antialias=int(antialias))


_RESIZE_CASES = []


def _c(name, fn, inputs, **kw):
    _RESIZE_CASES.append(case(name, fn, inputs, **kw))


def _r(shape, method, **kw):
    return lambda x: jax.image.resize(x, (x.shape[0], *shape), method, **kw)


_NHWC = ("B", 6, 8, 3)
# resize: one Resize where verified equal (float32; float64 has no ORT Resize kernel)
_c("linear_up", _r((12, 16, 3), "linear"), [_NHWC], expect=["Resize:Bx12x16x3"], variants=["f32"])
_c("bilinear_up_f64", _r((12, 16, 3), "bilinear"), [_NHWC], counts={"Resize": 0}, variants=["f64"])
_c(
    "linear_down_noaa",
    _r((3, 5, 3), "linear", antialias=False),
    [_NHWC],
    expect=["Resize:Bx3x5x3"],
    variants=["f32"],
)
_c("linear_down_aa", _r((3, 5, 3), "linear"), [_NHWC], counts={"Resize": 0})
_c("linear_mixed_aa", _r((3, 13, 3), "trilinear"), [_NHWC], counts={"Resize": 0})
_c("cubic_up", _r((9, 16, 3), "cubic"), [_NHWC], expect=["Resize:Bx9x16x3"], variants=["f32"])
_c("bicubic_down_aa", _r((4, 3, 3), "bicubic"), [_NHWC], expect=["Resize"], variants=["f32"])
_c("cubic_down_noaa", _r((4, 3, 3), "cubic", antialias=False), [_NHWC], counts={"Resize": 0})
_c("cubic_f64", _r((4, 11, 3), "tricubic"), [_NHWC], variants=["f64"])
_c("lanczos3_up", _r((9, 13, 3), "lanczos3"), [_NHWC], counts={"Resize": 0, "MatMul": 2})
_c("lanczos3_down", _r((4, 5, 3), "lanczos3"), [_NHWC])
_c("lanczos5_down", _r((3, 8, 3), "lanczos5", antialias=False), [_NHWC], counts={"MatMul": 1})
_c("lanczos5_up", _r((7, 17, 3), "lanczos5"), [_NHWC])
_c("nearest_up", _r((13, 16, 3), "nearest"), [_NHWC], expect=["Gather -> Gather:Bx13x16x3"])
_c("nearest_down", _r((4, 3, 3), "nearest"), [_NHWC])
_c("nearest_large", lambda x: jax.image.resize(x, (31, 2), "nearest"), [(100, 5)])
_c("nearest_int", _r((4, 11, 3), "nearest"), [_NHWC], dtypes=[np.int32])
_c("linear_int", _r((9, 4, 3), "linear"), [_NHWC], dtypes=[np.int32], input_range=(-50, 50))
_c("nchw", lambda x: jax.image.resize(x, (x.shape[0], 3, 9, 5), "linear"), [("B", 3, 6, 4)])
_c("rank2", lambda x: jax.image.resize(x, (7, 3), "cubic"), [(4, 6)], counts={"MatMul": 2})
_c("method_enum", _r((8, 8, 3), jax.image.ResizeMethod.LINEAR), [_NHWC], variants=["f32"])
_c("opset17", _r((12, 16, 3), "linear"), [_NHWC], opset=17, counts={"Resize": 0})
_c(
    "vmap",
    jax.vmap(lambda x: jax.image.resize(x, (12, 16, 3), "linear")),
    [_NHWC],
    expect=["Resize:Bx12x16x3"],
    variants=["f32"],
)
_c("vmap_lanczos", jax.vmap(lambda x: jax.image.resize(x, (3, 9), "lanczos3")), [(2, "B", 5)])
_c(
    "grad",
    jax.grad(lambda x: (jax.image.resize(x, (2, 9, 5, 3), "linear") ** 2).sum()),
    [(2, 6, 8, 3)],
)
_c(
    "grad_cubic",
    jax.grad(lambda x: (jax.image.resize(x, (5, 3), "cubic") ** 2 * jnp.arange(3.0)).sum()),
    [(4, 6)],
)


@rules.lowering(resize_p, min_opset=18, cases=_RESIZE_CASES)
def resize(ctx, x, *, shape, method, antialias, precision):
    """One Resize (half_pixel; linear, or cubic with a=-0.5 and exclude_outside) where ORT
    equals JAX; otherwise JAX's per-axis weight matrices as MatMuls (see the module docstring).
    """
    method = _method(method)
    attrs = _resize_form(ctx, method, antialias)
    if attrs is None:
        return _resize_matmul(
            ctx, x, shape=shape, method=method, antialias=antialias, precision=precision
        )
    out = ctx.avals_out[0].shape
    sizes = i64(ctx, [int(out[1]), int(out[2])])
    return ctx.op.Resize(x, None, None, sizes, axes=[1, 2], **attrs)


@rules.lowering(resize_p)
def _resize_matmul(ctx, x, *, shape, method, antialias, precision):
    """Per resized axis: Gather with JAX's indices (nearest) or MatMul with JAX's weights.

    The weights are exactly JAX's (the original resize of an identity matrix,
    computed at conversion time in the output dtype); integer images are cast
    to the float output dtype first, as JAX promotes them.
    """
    method = _method(method)
    axes = _resized_axes(ctx)
    if method == _Method.NEAREST:
        for d, m, n in axes:
            x = ctx.op.Gather(x, i64(ctx, _nearest_indices(m, n)), axis=d)
        return x
    out_dtype = np.dtype(ctx.avals_out[0].dtype)
    if np.dtype(ctx.avals_in[0].dtype) != out_dtype:
        x = cast(ctx, x, out_dtype)
    rank = len(ctx.avals_in[0].shape)
    for d, m, n in axes:
        w = _weights(m, n, out_dtype, method, antialias, precision)
        if d == rank - 1:
            x = ctx.op.MatMul(x, w)
        elif d == rank - 2:
            x = ctx.op.MatMul(np.ascontiguousarray(w.T), x)
        else:
            perm = list(range(rank))
            perm[d], perm[-1] = perm[-1], perm[d]
            x = ctx.op.Transpose(ctx.op.MatMul(ctx.op.Transpose(x, perm=perm), w), perm=perm)
    return x
