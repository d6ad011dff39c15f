"""A mixed-precision Flax NNX decoder: bfloat16 compute, float32 parameters.

The usual mixed-precision setup (``dtype=jnp.bfloat16, param_dtype=jnp.float32``)
on a small decoder stack (``nnx.Embed``, causal ``nnx.MultiHeadAttention``,
``nnx.LayerNorm``/``nnx.RMSNorm``, a GELU MLP, residuals) with a dynamic batch:

- the default export passes the full ONNX check, runs in ONNX Runtime CPU and
  matches JAX at bfloat16 tolerances;
- by default no op reads a bfloat16 operand unless ONNX Runtime CPU has a
  bfloat16 kernel for it; ``native_half_precision=True`` keeps the bfloat16
  compute ops, with fewer Casts;
- each parameter is stored once.

``decoder()`` and ``TOKENS`` are also used by ``benchmarks/precision.py``.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx.plugin import native_kernel, run_session

nnx = pytest.importorskip("flax.nnx")

VOCAB, DIM, HEADS, DEPTH, SEQ = 64, 32, 4, 2, 8
TOKENS = jax.ShapeDtypeStruct(("B", SEQ), np.int32)  # token ids, dynamic batch
BF16 = np.dtype(ml_dtypes.bfloat16)
MIXED = {"dtype": jnp.bfloat16, "param_dtype": jnp.float32}


class Block(nnx.Module):
    """Pre-norm: ``x + attn(ln(x))`` (causal), then ``x + mlp(rms(x))``."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.ln = nnx.LayerNorm(DIM, **MIXED, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(HEADS, DIM, decode=False, **MIXED, rngs=rngs)
        self.rms = nnx.RMSNorm(DIM, **MIXED, rngs=rngs)
        self.fc = nnx.Linear(DIM, 4 * DIM, **MIXED, rngs=rngs)
        self.proj = nnx.Linear(4 * DIM, DIM, **MIXED, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attn(self.ln(x), mask=mask)
        return x + self.proj(jax.nn.gelu(self.fc(self.rms(x))))


class Decoder(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, DIM, **MIXED, rngs=rngs)
        self.blocks = nnx.List([Block(rngs=rngs) for _ in range(DEPTH)])
        self.ln_f = nnx.LayerNorm(DIM, **MIXED, rngs=rngs)
        self.head = nnx.Linear(DIM, VOCAB, **MIXED, rngs=rngs)

    def __call__(self, ids):
        x = self.embed(ids)
        mask = nnx.make_causal_mask(ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def decoder() -> Decoder:
    return Decoder(rngs=nnx.Rngs(0))


def tokens(batch: int = 3) -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB, (batch, SEQ)).astype(np.int32)


@pytest.fixture(scope="module")
def model():
    return decoder()


@pytest.fixture(scope="module")
def exports(model):
    return {
        native: to_onnx(model, [TOKENS], native_half_precision=native) for native in (False, True)
    }


def _types(proto: onnx.ModelProto) -> dict[str, int]:
    """Every value's element type, as ONNX shape inference gives it."""
    graph = onnx.shape_inference.infer_shapes(proto).graph
    types = {i.name: i.data_type for i in graph.initializer}
    for value in (*graph.input, *graph.output, *graph.value_info):
        types[value.name] = value.type.tensor_type.elem_type
    return types


def _opset(proto: onnx.ModelProto) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def test_default_export_runs_and_matches_jax(model, exports):
    proto = exports[False]
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 3):  # the batch is dynamic
        ids = tokens(batch)
        want = np.asarray(jax.jit(lambda i: model(i))(ids))
        (got,) = run_session(session, {session.get_inputs()[0].name: ids})
        assert got.dtype == want.dtype == BF16
        assert got.shape == want.shape == (batch, SEQ, VOCAB)
        # Logits up to about 3.5, where a bfloat16 step is 1.6e-2: the absolute
        # tolerance is 1e-2 of their scale. Two blocks of bfloat16 roundings leave
        # JAX itself that far apart: jax.jit and op-by-op JAX (jax.disable_jit) differ
        # by up to 2.0e-2 here, and ONNX Runtime is 2.3e-2 from jax.jit, 2.0e-2 from
        # op-by-op JAX (and closer than jax.jit to the float32 computation).
        got, want = got.astype(np.float32), want.astype(np.float32)
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=1e-2 * scale)


def test_default_graph_reads_bfloat16_only_where_ort_has_the_kernel(exports):
    proto = exports[False]
    types, opset = _types(proto), _opset(proto)
    bf16 = onnx.TensorProto.BFLOAT16
    offending = collections.Counter(
        node.op_type
        for node in proto.graph.node
        if any(types.get(name) == bf16 for name in node.input if name)
        and not native_kernel(node.op_type, BF16, opset)
    )
    assert not offending, (
        f"bfloat16 operands of ops ORT CPU has no bfloat16 kernel for: {offending}"
    )


def test_native_half_precision_keeps_bfloat16_compute(exports):
    native, default = exports[True], exports[False]
    types = _types(native)
    bf16 = onnx.TensorProto.BFLOAT16
    computed = collections.Counter(
        node.op_type
        for node in native.graph.node
        if any(types.get(name) == bf16 for name in node.input if name)
        and not native_kernel(node.op_type, BF16, _opset(native))
    )
    assert computed["MatMul"] > 0, computed  # the MLP's and the head's matmuls stay bfloat16
    casts = [sum(n.op_type == "Cast" for n in p.graph.node) for p in (native, default)]
    assert casts[0] < casts[1], f"Casts: native {casts[0]}, default {casts[1]}"


def test_parameters_are_stored_once(model, exports):
    """Each float32 parameter is one initializer: itself, or (Flax's dtype promotion
    applied at conversion, see docs/macro_primitives.md) its bfloat16 rounding, which
    is what the model computes with; never both, never widened."""
    params = [np.asarray(p) for p in jax.tree.leaves(nnx.state(model, nnx.Param))]
    assert all(p.dtype == np.float32 for p in params)
    param_bytes = sum(p.nbytes for p in params)
    # a constant parameter (zero biases, unit scales) cannot be told from a constant
    # of the same value, nor from another such parameter: only the others are traced
    traced = [k for k, p in enumerate(params) if np.unique(p).size > 1]
    for native, proto in exports.items():
        stored = [onnx.numpy_helper.to_array(i) for i in proto.graph.initializer]
        copies = {}
        for k in traced:  # the same values, in any layout (attention kernels are reshaped)
            p = params[k].ravel()
            copies[k] = [
                s.dtype
                for s in stored
                if s.size == p.size
                and (
                    (s.dtype == np.float32 and np.array_equal(s.ravel(), p))
                    or (s.dtype == BF16 and np.array_equal(s.ravel(), p.astype(BF16)))
                )
            ]
        wrong = {k: c for k, c in copies.items() if len(c) != 1}
        assert not wrong, f"native={native}: parameters not stored exactly once: {wrong}"
        total = sum(s.nbytes for s in stored)
        # the weights (each once, as float32 or bfloat16) plus a few small constants
        assert total <= param_bytes + 1024, (native, total, param_bytes)
        assert total >= sum(params[k].nbytes for k in traced) / 2, (native, total)
