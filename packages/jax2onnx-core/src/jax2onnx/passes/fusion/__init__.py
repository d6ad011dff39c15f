"""``FusePatternsPass``: the ops a person would write, found in what the lowerings emitted.

Models that jax2onnx does not intercept (a layer norm written in ``jnp``, an
activation captured in a table at import time) lower op by op. This pass
first brings the lowered graph to canonical forms (:mod:`.canonical`; NaN and
finiteness tests in fewer nodes, :mod:`.finite`; reads by constant indices,
:mod:`.reads`; selections a selection around them decides, :mod:`.selects`), then
replaces known patterns with the single ONNX op that computes them
(:mod:`.products`: small matrix products written out; :mod:`.layer_norm`,
:mod:`.keras_norm`, :mod:`.group_norm`, :mod:`.rms_norm`)
and folds inference batch norms into the product before them
(:mod:`.batch_norm_fold`); activations become ``Gelu``, ``HardSigmoid``,
``HardSwish``, ``Softplus`` and ``Mish`` (:mod:`.gelu`, :mod:`.hard_sigmoid`,
:mod:`.softplus`), and, after everything else, rectifiers ``Relu``, ``Clip`` and
``LeakyRelu`` (:mod:`.rectifiers`). Each rewrite lives in its own module, declares the
op types its anchor node may have, and fires only when no value inside the
pattern is read outside it and the target opset has the op; the numbers stay
within the dtype's tolerance of the decomposed form. The matcher is our own
(:mod:`.match`): onnxscript's rewriter runs on the same IR, but importing it
costs 0.21 s, two thirds of a whole first conversion.

Attention written op by op goes in three groups, in this order: softmaxes
become ``Softmax``/``LogSoftmax`` (:mod:`.softmax`), rotary embeddings
``RotaryEmbedding`` (:mod:`.rotary`), then ``softmax(q k^T * scale + mask) v``
one ``Attention`` (:mod:`.attention`, masks in :mod:`.attention_mask`), which
reads the rotated queries and keys as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jax2onnx.passes.bodies import nested_graphs, subgraphs
from jax2onnx.passes.fusion import (
    attention,
    axes,
    batch_norm_fold,
    canonical,
    finite,
    gelu,
    group_norm,
    hard_sigmoid,
    keras_norm,
    layer_norm,
    products,
    reads,
    rectifiers,
    rms_norm,
    rotary,
    selects,
    softmax,
    softplus,
)
from jax2onnx.passes.fusion.match import DEFAULT_DOMAINS, new_constant
from jax2onnx.values.ir import ir

Rewrite = tuple[Sequence[str], Callable[[Any, ir.Node], bool]]

# applied in this order; each group until nothing changes
GROUPS: tuple[tuple[Rewrite, ...], ...] = (
    canonical.REWRITES
    + finite.REWRITES
    + reads.REWRITES
    + selects.REWRITES
    + ((("Reshape",), axes.reshape_of_layout),),
    layer_norm.REWRITES + keras_norm.REWRITES,
    gelu.REWRITES + hard_sigmoid.REWRITES + softplus.REWRITES,  # activations
    group_norm.REWRITES,
    rms_norm.REWRITES,
    batch_norm_fold.REWRITES,
    softmax.REWRITES,
    rotary.REWRITES,
    attention.REWRITES,
    rectifiers.REWRITES,  # the patterns above read max/min forms themselves
    axes.LATE  # operands lose the unit axes the patterns above may read
    + finite.LATE,  # any/all of booleans reduce them directly (opset 20)
)
# what ComposeGathersPass and the constant folding after the fusions leave (a second
# FusePatternsPass): products of element reads, reads by indices that became constant
AFTER_GATHERS: tuple[tuple[Rewrite, ...], ...] = (
    products.REWRITES,
    # the product's reads meet the stores; reads by indices constant folding decided
    axes.AFTER_GATHERS + reads.REWRITES,
)
# what unrolling a Loop leaves: each step's tests of its known counter (a Where of
# constants compared with one), run by UnrollCountedLoopsPass on what it wrote
AFTER_UNROLL: tuple[tuple[Rewrite, ...], ...] = (canonical.REWRITES + selects.REWRITES,)
MAX_ROUNDS = 8


class Context:
    """What a rewrite reads besides the node: the graph, the opset, the options."""

    def __init__(
        self, graph: ir.Graph, opset: int, normalization_mode: str, owner: ir.Node | None = None
    ) -> None:
        self.graph = graph
        self.opset = opset
        self.normalization_mode = normalization_mode
        self.owner = owner  # the Loop, Scan or If whose body or branch ``graph`` is

    def constant(self, array: np.ndarray, hint: str) -> ir.Value:
        """A new initializer of the graph holding ``array``."""
        return new_constant(self.graph, np.asarray(array), hint)


class FusePatternsPass(ir.passes.InPlacePass):
    """Rewrite canonical forms, then fuse patterns into single ONNX ops (see the module)."""

    def __init__(
        self, normalization_mode: str = "auto", groups: tuple[tuple[Rewrite, ...], ...] = GROUPS
    ) -> None:
        super().__init__()
        self.normalization_mode = normalization_mode
        self.groups = groups

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", model.graph.opset_imports.get("", 1))
        modified = False
        # the main graph, then every Loop/Scan/If body in it, where each node runs per step
        owners = {
            id(sub): node
            for graph in [model.graph, *nested_graphs(model.graph)]
            for node in graph
            for sub in subgraphs(node)
        }
        for graph in [model.graph, *nested_graphs(model.graph)]:
            ctx = Context(graph, opset, self.normalization_mode, owners.get(id(graph)))
            for group in self.groups:
                by_type: dict[str, list[Callable[[Any, ir.Node], bool]]] = {}
                for op_types, rewrite in group:
                    for op_type in op_types:
                        by_type.setdefault(op_type, []).append(rewrite)
                for _ in range(MAX_ROUNDS):
                    if not _round(ctx, by_type):
                        break
                    modified = True
        return ir.passes.PassResult(model, modified)


def _round(ctx: Context, by_type: dict[str, list[Callable[[Any, ir.Node], bool]]]) -> bool:
    changed = False
    for node in list(ctx.graph):
        if node.graph is None or node.domain not in DEFAULT_DOMAINS:
            continue  # removed by an earlier rewrite of this round, or not ONNX's
        for rewrite in by_type.get(node.op_type, ()):
            if rewrite(ctx, node):
                changed = True
                break
    return changed
