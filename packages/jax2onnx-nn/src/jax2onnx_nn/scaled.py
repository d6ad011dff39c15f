"""``jax.nn.scaled_matmul`` as the macro primitive ``nn.scaled_matmul``.

``scaled_matmul(a, b, a_scales, b_scales)`` is a block-scaled batched matmul:
``a`` ``(B, M, K)`` and ``b`` ``(B, N, K)`` are multiplied block-wise by their
scales ``(B, M, K // block)`` / ``(B, N, K // block)`` along the contracting
axis, then contracted: ``einsum("bmk,bnk->bmn")``, in float32, cast to
``preferred_element_type``. JAX implements it only as a cuDNN custom call
(CUDA/ROCm): on CPU JAX cannot evaluate it at all. The primitive's ``impl``
is therefore JAX's documented math (the docstring of ``jax.nn.scaled_matmul``)
and the lowering is that math: Cast to float32 (float64 operands stay
float64), ``Reshape -> Mul(Unsqueeze(scales)) -> Reshape`` per operand, one
``MatMul`` against the transposed ``b``, and a Cast to the output dtype.

JAX's own primitive ``scaled_matmul_wrapper`` (what ``jax.nn.scaled_matmul``
binds, and what ``jax.nn.scaled_dot_general`` binds after quantizing) gets
the same lowering, so a traced ``scaled_matmul_wrapper`` converts too.

Dtypes: float32/float16/bfloat16/float64 operands and scales, and
float8_e4m3fn / float8_e5m2 operands produced inside the graph (ONNX Cast
widens them exactly). ``float8_e8m0fnu`` scales have no ONNX type before
opset 24 and no ONNX Runtime kernels at all; those that are a BitCast of
uint8 exponents (what the ``mxfp8`` quantization of ``scaled_dot_general``
makes, which needs opset 26 for its BitCasts anyway) are decoded from the
exponents as ``2**(e - 127)``; any other e8m0 operand, and ``float4_e2m1fn``
(``nvfp4``: ONNX Runtime has no Cast kernel for it), is refused with an error
saying so.

Batching is explicit: the vmapped axis is merged into ``B`` (one MatMul).
JAX defines no derivative for ``scaled_matmul``; the macro is declared
non-differentiable (``jax.grad`` says so). ``scaled_dot_general`` is not
intercepted: without ``configs`` it is ``lax.dot_general``; with the ``mxfp8``
configuration its decomposition (JAX's quantization, then
``scaled_matmul_wrapper``) converts at opset >= 26, under ``jax.vmap`` and
``jax.grad`` (JAX's custom VJP) too.

Since JAX cannot run either function on CPU, the cases compare ONNX Runtime
with JAX's documented math: their functions call ``jax.nn`` while ``to_onnx``
traces and the reference math otherwise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax._src import core as jax_core
from jax._src.cudnn.scaled_matmul_stablehlo import _scaled_matmul_p_wrapper
from jax._src.cudnn.scaled_matmul_stablehlo import quantize as _quantize

from jax2onnx.plugin import Family, batch_at_front, case, onnx_dtype
from jax2onnx_nn._util import F32, F64, macro

family = Family("nn")
register = family.register

_scaled_matmul = jax.nn.scaled_matmul  # the original, captured before the interception
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)

_UNSUPPORTED = {
    _E8M0: "ONNX has FLOAT8E8M0 only from opset 24 and ONNX Runtime has no kernels for it; "
    "pass float32 scales (2**(e - 127) of the e8m0 exponents e) instead",
    np.dtype(ml_dtypes.float4_e2m1fn): "ONNX Runtime has no Cast kernel for FLOAT4E2M1 (the "
    "nvfp4 configuration); use float8 operands (mxfp8) or float32",
}


def _compute_dtype(*dtypes) -> np.dtype:
    """float32, the compute type JAX documents; float64 when an operand is float64."""
    return F64 if any(np.dtype(d) == F64 for d in dtypes) else F32


def scaled_matmul_reference(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=np.float32):
    """JAX's documented math of ``jax.nn.scaled_matmul``, runnable on every backend."""
    ct = _compute_dtype(lhs.dtype, rhs.dtype, lhs_scales.dtype, rhs_scales.dtype)

    def dequantized(x, s):
        block = x.shape[-1] // s.shape[-1]
        return x.astype(ct) * jnp.repeat(s.astype(ct), block, axis=-1)

    out = jnp.einsum(
        "bmk,bnk->bmn",
        dequantized(lhs, lhs_scales),
        dequantized(rhs, rhs_scales),
        precision=jax.lax.Precision.HIGHEST,
        preferred_element_type=ct,
    )
    return out.astype(preferred_element_type)


def _scaled_matmul_batching(args, dims, *, preferred_element_type):
    """The vmapped axis merged into ``B``: one primitive, one MatMul."""
    args = batch_at_front(args, dims)
    v, b = args[0].shape[:2]
    flat = [jnp.reshape(x, (v * b, *x.shape[2:])) for x in args]
    out = scaled_matmul_p.bind(*flat, preferred_element_type=preferred_element_type)
    return jnp.reshape(out, (v, b, *out.shape[1:])), 0


scaled_matmul_p = macro(
    family,
    "scaled_matmul",
    scaled_matmul_reference,
    ["jax.nn.scaled_matmul"],
    batching=_scaled_matmul_batching,
    jvp=None,
)


def _dequantized(ctx, x, s, aval, scale_aval, ct):
    """``x * repeat(s, block, axis=-1)`` in ``ct``: Reshape -> Mul(Unsqueeze(s)) -> Reshape."""
    k, kb = int(aval.shape[-1]), int(scale_aval.shape[-1])
    x, s = ctx.cast(x, ct), ctx.cast(s, ct)
    if kb == k:
        return ctx.op.Mul(x, s)
    blocks = ctx.op.Reshape(x, ctx.i64([0, 0, kb, k // kb]))
    scaled = ctx.op.Mul(blocks, ctx.op.Unsqueeze(s, ctx.i64([-1])))
    return ctx.op.Reshape(scaled, ctx.i64([0, 0, k]))


def _e8m0_scales(ctx, s, aval):
    """float8_e8m0fnu scales that are a BitCast of uint8 exponents ``e`` (what
    ``scaled_dot_general``'s mxfp8 quantization makes): ``2**(e - 127)`` in float32,
    NaN for ``e == 255``, computed from ``e`` itself (ONNX Runtime has no e8m0 kernels).
    """
    if np.dtype(aval.dtype) != _E8M0:
        return None
    reshapes = []  # vmap's batching rule reshapes the scales between BitCast and here
    producer = s.producer()
    while producer is not None and producer.op_type == "Reshape":
        reshapes.append(producer)
        producer = producer.inputs[0].producer()
    if (
        producer is None
        or producer.op_type != "BitCast"
        or producer.inputs[0].dtype != onnx_dtype(np.uint8)
    ):
        return None
    e = ctx.cast(producer.inputs[0], F32)
    power = ctx.op.Pow(np.asarray(2.0, F32), ctx.op.Sub(e, np.asarray(127.0, F32)))
    out = ctx.op.Where(ctx.op.Equal(e, np.asarray(255.0, F32)), np.asarray(np.nan, F32), power)
    for node in reversed(reshapes):
        allowzero = node.attributes.get("allowzero")
        out = ctx.op.Reshape(
            out, node.inputs[1], allowzero=allowzero.as_int() if allowzero else None
        )
    return out


def _lower(ctx, lhs, rhs, lhs_scales, rhs_scales):
    avals = list(ctx.avals_in)
    values = [lhs, rhs, lhs_scales, rhs_scales]
    for i in (2, 3):
        decoded = _e8m0_scales(ctx, values[i], avals[i])
        if decoded is not None:
            values[i] = decoded
            avals[i] = jax.ShapeDtypeStruct(avals[i].shape, F32)
    lhs, rhs, lhs_scales, rhs_scales = values
    for aval in avals:
        reason = _UNSUPPORTED.get(np.dtype(aval.dtype))
        if reason is not None:
            raise ctx.error(
                f"scaled_matmul with {np.dtype(aval.dtype).name} operands cannot be exported: "
                f"{reason}."
            )
        if any(not isinstance(d, int) for d in aval.shape[2:]):
            raise ctx.error("scaled_matmul needs a static contracting axis and block count")
    ct = _compute_dtype(*(a.dtype for a in avals))
    a = _dequantized(ctx, lhs, lhs_scales, avals[0], avals[2], ct)
    b = _dequantized(ctx, rhs, rhs_scales, avals[1], avals[3], ct)
    out = ctx.op.MatMul(a, ctx.op.Transpose(b, perm=[0, 2, 1]))
    return ctx.cast(out, ctx.avals_out[0].dtype)


def _via_jax_nn(*args, **kwargs):
    """``jax.nn.scaled_matmul`` while ``to_onnx`` traces (the interception is active);
    outside, where JAX cannot run it on CPU, the check's reference is JAX's documented math.
    """
    fn = jax.nn.scaled_matmul
    return (scaled_matmul_reference if fn is _scaled_matmul else fn)(*args, **kwargs)


def _fp8(dtype):
    def fn(a, b, sa, sb):
        return _via_jax_nn(a.astype(dtype), b.astype(dtype), sa, sb)

    return fn


_SHAPES = [("B", 3, 64), ("B", 4, 64), ("B", 3, 2), ("B", 4, 2)]


@family.lowering(
    scaled_matmul_p,
    cases=lambda: [
        case(
            "scaled_matmul",
            _via_jax_nn,
            _SHAPES,
            expect=["Reshape -> Mul -> Reshape -> MatMul"],
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "per_element_scales",
            _via_jax_nn,
            [(2, 3, 8), (2, 5, 8), (2, 3, 8), (2, 5, 8)],
            counts={"Reshape": 0, "MatMul": 1},
        ),
        case(
            "e4m3fn_operands",
            _fp8(jnp.float8_e4m3fn),
            _SHAPES,
            input_range=(-4.0, 4.0),
            variants=["f32"],
            opset=19,  # float8 types exist from opset 19
        ),
        case(
            "e5m2_operands",
            _fp8(jnp.float8_e5m2),
            [(2, 3, 32), (2, 2, 32), (2, 3, 4), (2, 2, 4)],
            input_range=(-4.0, 4.0),
            variants=["f32"],
            opset=19,  # float8 types exist from opset 19
        ),
        case(
            "bf16_out",
            lambda a, b, sa, sb: _via_jax_nn(
                a, b, sa, sb, preferred_element_type=jnp.bfloat16
            ).astype(jnp.float32),
            _SHAPES,
            variants=["f32"],
            # bfloat16 output: a 1-ulp float32 difference of the MatMul's summation order
            # may round to the neighbouring bfloat16 (relative step 2**-8)
            tolerances={"float32": (8e-3, 1e-2)},
        ),
        case(
            "f16_operands",
            _via_jax_nn,
            [(1, 2, 16), (1, 3, 16), (1, 2, 1), (1, 3, 1)],
            dtypes=[np.float16] * 4,
        ),
        case(
            "vmap",
            jax.vmap(_via_jax_nn),
            [("V", 2, 3, 32), ("V", 2, 4, 32), ("V", 2, 3, 4), ("V", 2, 4, 4)],
            counts={"MatMul": 1},
        ),
        case(
            "vmap_unbatched_rhs",
            jax.vmap(_via_jax_nn, in_axes=(0, None, 0, None)),
            [("V", 1, 3, 16), (1, 2, 16), ("V", 1, 3, 2), (1, 2, 2)],
            counts={"MatMul": 1},
        ),
    ],
)
def scaled_matmul(ctx, lhs, rhs, lhs_scales, rhs_scales, *, preferred_element_type):
    """Dequantize both operands block-wise and one MatMul (see the module docstring)."""
    return _lower(ctx, lhs, rhs, lhs_scales, rhs_scales)


@family.lowering(_scaled_matmul_p_wrapper)
def scaled_matmul_wrapper(ctx, lhs, rhs, lhs_scales, rhs_scales, *, preferred_element_type):
    """JAX's own ``scaled_matmul_wrapper`` primitive: the same lowering (one output)."""
    return [_lower(ctx, lhs, rhs, lhs_scales, rhs_scales)]


_DN = (((2,), (2,)), ((0,), (0,)))
_MXFP8 = jax.nn.get_scaled_dot_general_config("mxfp8")


def _mxfp8(a, b):
    """``scaled_dot_general`` with the mxfp8 configuration while ``to_onnx`` traces;
    outside, where JAX cannot run it on CPU, JAX's own quantization and the documented math.
    """
    if jax.nn.scaled_matmul is not _scaled_matmul:  # the interceptions are active
        return jax.nn.scaled_dot_general(a, b, _DN, configs=[_MXFP8] * 3)
    (aq, a_scales), (bq, b_scales) = (_quantize(v, _MXFP8) for v in (a, b))
    return scaled_matmul_reference(aq, bq, a_scales, b_scales)


def _mxfp8_loss(a, b):
    return (jax.nn.scaled_dot_general(a, b, _DN, configs=[_MXFP8] * 3) ** 2).sum()


def _mxfp8_grad(a, b):
    """``jax.grad`` through mxfp8 ``scaled_dot_general`` (JAX's custom VJP: the cotangent
    quantized too). Outside ``to_onnx`` JAX's own gradient jaxpr is evaluated with the
    documented math standing in for the cuDNN-only ``scaled_matmul_wrapper``.
    """
    grad = jax.grad(_mxfp8_loss, argnums=(0, 1))
    if jax.nn.scaled_matmul is not _scaled_matmul:  # the interceptions are active
        return grad(a, b)
    closed = jax.make_jaxpr(grad)(a, b)
    return tuple(_eval_with_reference(closed.jaxpr, closed.consts, a, b))


def _eval_with_reference(jaxpr, consts, *args):
    env = {}

    def read(v):
        return v.val if isinstance(v, jax_core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn.primitive is _scaled_matmul_p_wrapper:
            outs = [scaled_matmul_reference(*ins, **eqn.params)]
        elif eqn.primitive.name in ("pjit", "jit", "closed_call"):
            sub = eqn.params["jaxpr"]
            outs = _eval_with_reference(sub.jaxpr, sub.consts, *ins)
        else:
            outs = eqn.primitive.bind(*ins, **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


family.add_cases(
    "jax.nn.scaled_dot_general",
    lambda: [
        case(
            "mxfp8_vmap",
            jax.vmap(_mxfp8),
            [("V", 2, 3, 64), ("V", 2, 4, 64)],
            opset=26,
            variants=["f32"],
            counts={"MatMul": 1},
        ),
        case(
            "mxfp8_grad",
            _mxfp8_grad,
            [(1, 32, 64), (1, 32, 64)],
            opset=26,
            variants=["f32"],
        ),
        case(
            "mxfp8",
            _mxfp8,
            [(2, 3, 64), (2, 4, 64)],
            opset=26,  # its quantization bitcasts float32 <-> uint32
            variants=["f32"],
            expect=["Pow -> Where -> Unsqueeze -> Mul -> Reshape -> MatMul"],
        ),
        case(
            "no_configs",
            lambda a, b: jax.nn.scaled_dot_general(a, b, _DN),
            [("B", 3, 8), ("B", 4, 8)],
            # float64 operands multiply in float64, then one Cast to the float32 result
            expect=["MatMul"],
            counts={"MatMul": 1, "Reshape": 0},
        ),
        case(
            "no_configs_grad",
            jax.grad(lambda a, b: (jax.nn.scaled_dot_general(a, b, _DN) ** 2).sum()),
            [(2, 3, 8), (2, 4, 8)],
            variants=["f32"],
        ),
        case(
            "no_configs_grad_f64",
            jax.grad(lambda a, b: (jax.nn.scaled_dot_general(a, b, _DN) ** 2).sum()),
            [(2, 3, 8), (2, 4, 8)],
            variants=["f64"],
            # the products are float32 (preferred_element_type), so the float64 gradient
            # carries float32 rounding; XLA sums the float32 dot in another order (1 ulp)
            tolerances={"float64": (1e-6, 1e-6)},
        ),
    ],
)
