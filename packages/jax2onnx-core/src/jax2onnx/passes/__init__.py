"""Step 5: clean the graph with onnx_ir's own passes, plus our own.

Unused nodes go, equal subexpressions merge, unused functions and opset
imports go; onnx_ir has these. Ours: :class:`EliminateIdentitiesPass`
(onnx_ir's identity elimination can list one value twice among a graph's
outputs); :class:`FoldTransposesPass` moves the Transposes that
channels-last convolutions, pooling and the NCHW adaptors create through the
layout-agnostic ops between them until they meet and cancel;
:class:`FoldReshapesPass` collapses Reshape chains and drops Reshapes that
keep the shape; :class:`FoldConstantsPass` computes, once at conversion time,
the nodes whose inputs are all initializers (a bias reshaped for
broadcasting, ``rsqrt(var + eps)`` of a normalisation) for the ops whose
NumPy result is bit-identical to ONNX Runtime's;
:class:`DeduplicateWeightsPass` merges equal initializers of any size;
:class:`FusePatternsPass` finds what a person would write as one op in
what the lowerings emitted op by op (a layer norm written in ``jnp`` becomes
``LayerNormalization``; see :mod:`jax2onnx.passes.fusion`);
:class:`FuseMatMulAddPass` turns a 2-D ``MatMul + Add`` (a dense layer
written as ``x @ w + b``, two primitives) into one Gemm. Every pass is
deterministic, so the same input gives a byte-identical model.
"""

from __future__ import annotations

from jax2onnx._ir import common, ir
from jax2onnx.passes.constants import FoldConstantsPass
from jax2onnx.passes.fusion import FusePatternsPass
from jax2onnx.passes.gemm import FuseMatMulAddPass
from jax2onnx.passes.identities import EliminateIdentitiesPass
from jax2onnx.passes.reshapes import FoldReshapesPass
from jax2onnx.passes.transposes import FoldTransposesPass
from jax2onnx.passes.weights import DeduplicateWeightsPass

__all__ = [
    "DeduplicateWeightsPass",
    "EliminateIdentitiesPass",
    "FoldConstantsPass",
    "FoldReshapesPass",
    "FoldTransposesPass",
    "FuseMatMulAddPass",
    "FusePatternsPass",
    "optimize",
]


def optimize(model: ir.Model, *, normalization_mode: str = "auto") -> ir.Model:
    """Run the cleanup passes in place and return the model.

    ``normalization_mode`` is ``to_onnx``'s: ``"force_decomposed"`` keeps
    normalisations written op by op as they are.
    """
    passes = ir.passes.Sequential(
        EliminateIdentitiesPass(),
        FoldConstantsPass(),
        FoldTransposesPass(),
        FoldReshapesPass(),
        common.RemoveUnusedNodesPass(),
        common.CommonSubexpressionEliminationPass(),
        common.RemoveUnusedNodesPass(),
        FusePatternsPass(normalization_mode),
        common.RemoveUnusedNodesPass(),
        FuseMatMulAddPass(),
        DeduplicateWeightsPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
    )
    passes(model)
    return model
