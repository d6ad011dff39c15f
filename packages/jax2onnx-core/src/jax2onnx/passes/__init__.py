"""Step 5: clean the graph with onnx_ir's own passes, plus our own.

Unused nodes go, equal subexpressions merge, unused functions and opset
imports go; onnx_ir has these, and :class:`MergeBodyDuplicatesPass` merges
equal subexpressions inside Loop and If bodies as well, where each runs once
per step. Ours: :class:`HoistLoopInvariantsPass` takes out of Loop bodies
what every step computes alike (carries returned unchanged, nodes reading only
values from outside the body); :class:`EliminateIdentitiesPass`
(onnx_ir's identity elimination can list one value twice among a graph's
outputs); :class:`FoldTransposesPass` moves the Transposes that
channels-last convolutions, pooling and the NCHW adaptors create through the
layout-agnostic ops between them until they meet and cancel;
:class:`FoldReshapesPass` collapses Reshape chains and drops Reshapes that
keep the shape; :class:`FoldIndexingPass` cancels Squeeze/Unsqueeze pairs and
merges stacked constant slices of one tensor into a Slice or a Gather, and
reads one element (``x[k]``) with one Gather (in Loop/If bodies too);
:class:`FoldIndexRangesPass` decides index comparisons, Wheres and Clips from
integer intervals (a loop counter bounded by its Loop's condition needs no
wrap-around or bounds check; a scatter's pad row for out-of-bounds writes
goes when its indices are in range), drops integer Cast round trips the intervals
allow (an ArgMax index cast to int32 and back) and merges layout-op chains,
moving a Cast among them before them;
:class:`VectorizeLanesPass` turns a stack of scalar computations that share
one expression tree (physics code written component by component) into that
tree on vectors, bit for bit;
:class:`TabulateChoicesPass` reads what nodes compute from one small index
alone (an LU's permutation from its pivot's ArgMax) from a table made at
conversion; :class:`FoldConstantsPass` computes, once at conversion time, the nodes
whose inputs are all initializers (a bias reshaped for broadcasting,
``rsqrt(var + eps)`` of a normalisation) for the ops whose NumPy result is
bit-identical to ONNX Runtime's, and small products of constants (MatMul,
Gemm, Einsum) in float64, rounded once;
:class:`DeduplicateWeightsPass` merges equal initializers of any size;
:class:`FusePatternsPass` finds what a person would write as one op in
what the lowerings emitted op by op (a layer norm written in ``jnp`` becomes
``LayerNormalization``; see :mod:`jax2onnx.passes.fusion`);
:class:`FuseMatMulAddPass` turns a 2-D ``MatMul + Add`` (a dense layer
written as ``x @ w + b``, two primitives) into one Gemm;
:class:`ComposeGathersPass` makes a read of a read by constant indices
(a Gather of a Gather or of a Slice, a Gather given a unit axis) one Gather;
:class:`UnrollCountedLoopsPass` writes out a short Loop of known length in a
Loop body (Runge-Kutta stages, ``fori_loop(0, 4, ...)`` in a time step), each
step reading its counter as a constant; :class:`CollapseLinearMapsPass` then
makes a web of ops linear in a few small tensors in a body (a Runge-Kutta
step's stages, dense output and error estimate) one MatMul by a matrix
composed at conversion per value it hands on; :class:`HoistLinearMapsPass`
makes a linear web whose coefficients a Loop keeps (a solve by LU factors made
before a chord iteration) one MatMul by a matrix the graph around computes;
:class:`SinkIntoUpdatesPass` moves a Loop body's work on values an If refreshes
now and then and otherwise passes on (a stage loop's LU factors) into the
refreshing branch, its results carried;
:class:`ForwardLoopCarriesPass` lets a Loop body return a carry (or its
condition) as the body input it copies instead of through an Identity;
:class:`LiftScalarsPass` keeps a leading unit axis on scalars read out of a
vector, computed on and stacked back (an ODE right-hand side written element
by element), so the Squeeze/Unsqueeze per element go;
:class:`ExitLoopsEarlyPass` lets a Loop that only skips its work once a
carried flag is false (a ``scan`` of ``cond(go, step, identity)``) stop there;
:class:`CountLoopTripsPass` gives a Loop bounded by counters stepped by one
its trip count, drops those tests from its condition and the carries nobody
needs. Every pass is
deterministic, so the same input gives a byte-identical model. Last, the
precision step (:mod:`jax2onnx.passes.precision`): bfloat16 ops ONNX
Runtime's CPU provider has no kernel for compute in float32 between Casts,
and Cast pairs that cancel go.

May use: values.
"""

from __future__ import annotations

from jax2onnx.passes.bodies import (
    MergeBodyDuplicatesPass,
    UniqueNamesPass,
    drop_unused_initializers,
)
from jax2onnx.passes.constants import FoldConstantsPass
from jax2onnx.passes.counters import CountLoopTripsPass
from jax2onnx.passes.exits import ExitLoopsEarlyPass
from jax2onnx.passes.fusion import AFTER_GATHERS, FusePatternsPass
from jax2onnx.passes.gathers import ComposeGathersPass
from jax2onnx.passes.gemm import FuseMatMulAddPass
from jax2onnx.passes.identities import EliminateIdentitiesPass, ForwardLoopCarriesPass
from jax2onnx.passes.indexing import FoldIndexingPass
from jax2onnx.passes.lanes import VectorizeLanesPass
from jax2onnx.passes.linear import CollapseLinearMapsPass
from jax2onnx.passes.loops import HoistLoopInvariantsPass
from jax2onnx.passes.maps import HoistLinearMapsPass
from jax2onnx.passes.precision import FoldCastsPass, WidenHalfPrecisionPass
from jax2onnx.passes.ranges import FoldIndexRangesPass
from jax2onnx.passes.reshapes import FoldReshapesPass
from jax2onnx.passes.scalars import LiftScalarsPass
from jax2onnx.passes.tables import TabulateChoicesPass
from jax2onnx.passes.transposes import FoldTransposesPass
from jax2onnx.passes.unroll import UnrollCountedLoopsPass
from jax2onnx.passes.updates import SinkIntoUpdatesPass
from jax2onnx.passes.weights import DeduplicateWeightsPass
from jax2onnx.values.ir import common, ir

__all__ = [
    "CollapseLinearMapsPass",
    "ComposeGathersPass",
    "CountLoopTripsPass",
    "DeduplicateWeightsPass",
    "EliminateIdentitiesPass",
    "ExitLoopsEarlyPass",
    "FoldCastsPass",
    "FoldConstantsPass",
    "FoldIndexRangesPass",
    "FoldIndexingPass",
    "FoldReshapesPass",
    "FoldTransposesPass",
    "ForwardLoopCarriesPass",
    "FuseMatMulAddPass",
    "FusePatternsPass",
    "HoistLinearMapsPass",
    "HoistLoopInvariantsPass",
    "LiftScalarsPass",
    "MergeBodyDuplicatesPass",
    "SinkIntoUpdatesPass",
    "UniqueNamesPass",
    "TabulateChoicesPass",
    "UnrollCountedLoopsPass",
    "VectorizeLanesPass",
    "WidenHalfPrecisionPass",
    "optimize",
]


def optimize(
    model: ir.Model, *, normalization_mode: str = "auto", native_half_precision: bool = False
) -> ir.Model:
    """Run the cleanup passes in place and return the model.

    ``normalization_mode`` and ``native_half_precision`` are ``to_onnx``'s:
    ``"force_decomposed"`` keeps normalisations written op by op as they are;
    ``native_half_precision=True`` keeps bfloat16 ops wherever ONNX allows them.
    """
    precision = [
        WidenHalfPrecisionPass(native=native_half_precision),
        FoldCastsPass(),
        common.RemoveUnusedNodesPass(),
    ]
    passes = ir.passes.Sequential(
        EliminateIdentitiesPass(),
        HoistLoopInvariantsPass(),
        FoldConstantsPass(),
        FoldTransposesPass(),
        FoldReshapesPass(),
        FoldIndexingPass(),
        FoldIndexRangesPass(),
        FoldConstantsPass(),  # what the decided comparisons left: And/Where of constants
        TabulateChoicesPass(),  # what a pivot's index decides: one table read
        common.RemoveUnusedNodesPass(),
        common.CommonSubexpressionEliminationPass(),
        MergeBodyDuplicatesPass(),
        common.RemoveUnusedNodesPass(),
        VectorizeLanesPass(),
        common.RemoveUnusedNodesPass(),
        common.CommonSubexpressionEliminationPass(),
        FusePatternsPass(normalization_mode),
        FoldConstantsPass(),  # what the canonical forms left constant (x - 0 of a constant)
        common.RemoveUnusedNodesPass(),
        FuseMatMulAddPass(),
        ComposeGathersPass(),  # after the fusions, whose patterns read the Gathers apart
        FusePatternsPass(normalization_mode, groups=AFTER_GATHERS),  # products of reads
        LiftScalarsPass(),
        ExitLoopsEarlyPass(),
        CountLoopTripsPass(),  # after the interval pass, which reads the counters' bounds
        UnrollCountedLoopsPass(),  # after the trip counts; folds the steps' constant reads
        common.RemoveUnusedNodesPass(),
        common.CommonSubexpressionEliminationPass(),
        CollapseLinearMapsPass(),  # the steps' sums meet
        common.RemoveUnusedNodesPass(),
        HoistLinearMapsPass(),  # solves by factors a Loop keeps: one product by a matrix
        common.RemoveUnusedNodesPass(),
        SinkIntoUpdatesPass(),  # after the bodies are lean: what is left to move is counted
        common.RemoveUnusedNodesPass(),
        *precision,
        DeduplicateWeightsPass(),
        # what reads equal constants the passes made apart is equal now: merged once more
        common.CommonSubexpressionEliminationPass(),
        MergeBodyDuplicatesPass(),
        common.RemoveUnusedNodesPass(),
        ForwardLoopCarriesPass(),
        # values a pass made in a body are named per graph: names unique across the model
        UniqueNamesPass(),  # onnx_ir's NameFixPass can repeat a body's name in its parent
        common.NameFixPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
    )
    declared = [(v.type, v.shape) for v in model.graph.outputs]
    passes(model)
    drop_unused_initializers(model)
    for value, (type_, shape) in zip(model.graph.outputs, declared, strict=True):
        # a pass may let another value stand for an output (CSE merging a Cast to float32 a
        # model returns with the same Cast feeding other ops): it keeps the output's type
        if value.type is None:
            value.type = type_
        if value.shape is None:
            value.shape = shape
    _fill_metadata(model.graph)
    return model


def _fill_metadata(graph: ir.Graph) -> None:
    """Nodes a pass made without source metadata (a Transpose moved through the graph,
    an Identity for a repeated output) take that of a node they feed, else of a node
    feeding them, when the lowering wrote any."""
    from jax2onnx.values.provenance import SOURCE_KEY

    nodes = list(graph)
    if not any(SOURCE_KEY in n.metadata_props for n in nodes):
        return
    for node in reversed(nodes):  # consumers first: a chain of new nodes fills backwards
        if SOURCE_KEY in node.metadata_props:
            continue
        near = [use.node for out in node.outputs for use in out.uses()]
        near += [v.producer() for v in node.inputs if v is not None]
        for other in near:
            if other is not None and SOURCE_KEY in other.metadata_props:
                node.metadata_props.update(other.metadata_props)
                break
