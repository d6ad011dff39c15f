"""A small picture of an ONNX graph as SVG, laid out in layers, made offline.

The layout is the usual layered drawing of a directed acyclic graph, kept
short: each node sits one layer below the deepest node it reads from (longest
path layering); a few sweeps order each layer by the mean position of its
neighbours (barycentre heuristic) to cut crossings; edges are cubic curves.
``Constant`` nodes and initializers are left out: they are weights, not steps.
Colours group op types (matrix products, normalizations, activations,
attention, shape and control-flow ops, arithmetic).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import onnx

ROW, BOX_HEIGHT, GAP, MARGIN, CHAR = 46, 24, 14, 16, 7.2

GROUPS = {
    "#4f6bed": {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "MatMulInteger"},
    "#2e9d5b": {
        "LayerNormalization", "RMSNormalization", "GroupNormalization",
        "BatchNormalization", "InstanceNormalization", "LpNormalization",
    },
    "#e5862d": {
        "Relu", "Gelu", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Erf", "Elu", "Selu",
        "LeakyRelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish", "PRelu",
        "Exp", "Log",
    },
    "#d64545": {"Attention", "RotaryEmbedding", "MultiHeadAttention"},
    "#8a63c9": {"Loop", "If", "Scan"},
    "#8d96a3": {
        "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Slice", "Gather",
        "GatherElements", "GatherND", "Expand", "Shape", "Flatten", "Split", "Pad", "Tile",
        "Identity", "Cast", "ScatterND", "ScatterElements", "Range", "ConstantOfShape",
    },
    "#c9a227": {
        "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean",
        "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceLogSumExp",
        "ArgMax", "ArgMin", "TopK", "CumSum",
    },
}  # fmt: skip
ARITHMETIC = "#5aa6c8"
ENDPOINT = "#ffffff"


def colour(op_type: str) -> str:
    for fill, ops in GROUPS.items():
        if op_type in ops:
            return fill
    return ARITHMETIC


def _layout(labels: Sequence[str], edges: Sequence[tuple[int, int]]) -> list[tuple[float, int]]:
    """(x centre, layer) of each vertex; vertices are in topological order."""
    preds: list[list[int]] = [[] for _ in labels]
    succs: list[list[int]] = [[] for _ in labels]
    for u, v in edges:
        preds[v].append(u)
        succs[u].append(v)
    layer = [0] * len(labels)
    for v in range(len(labels)):
        layer[v] = max((layer[u] + 1 for u in preds[v]), default=0)
    layers: list[list[int]] = [[] for _ in range(max(layer, default=0) + 1)]
    for v in range(len(labels)):
        layers[layer[v]].append(v)
    width = [len(label) * CHAR + 16 for label in labels]
    x = [0.0] * len(labels)

    def place() -> None:
        for row in layers:
            total = sum(width[v] for v in row) + GAP * (len(row) - 1)
            cursor = -total / 2
            for v in row:
                x[v] = cursor + width[v] / 2
                cursor += width[v] + GAP

    place()
    for sweep in range(4):  # down, up, down, up
        neighbours = preds if sweep % 2 == 0 else succs
        order = layers[1:] if sweep % 2 == 0 else layers[-2::-1]
        for row in order:
            keyed = [
                (sum(x[u] for u in neighbours[v]) / len(neighbours[v]) if neighbours[v] else x[v])
                for v in row
            ]
            row[:] = [v for _, _, v in sorted(zip(keyed, range(len(row)), row))]
        place()
    return [(x[v], layer[v]) for v in range(len(labels))]


def render(graph: onnx.GraphProto, title: str) -> str:
    """The SVG text of ``graph``'s top-level nodes, inputs and outputs."""
    labels: list[str] = []
    kinds: list[str] = []
    tips: list[str] = []
    produced: dict[str, int] = {}
    edges: list[tuple[int, int]] = []
    initializers = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name in initializers:
            continue
        produced[value.name] = len(labels)
        labels.append(value.name)
        kinds.append("input")
        tips.append(f"input {value.name}")
    for node in graph.node:
        if node.op_type == "Constant":
            continue
        here = len(labels)
        labels.append(node.op_type)
        kinds.append(node.op_type)
        tips.append(f"{node.op_type} {node.name}".strip())
        for name in dict.fromkeys(node.input):
            if name in produced:
                edges.append((produced[name], here))
        for name in node.output:
            if name:
                produced[name] = here
    for value in graph.output:
        here = len(labels)
        labels.append(value.name)
        kinds.append("output")
        tips.append(f"output {value.name}")
        if value.name in produced:
            edges.append((produced[value.name], here))
    places = _layout(labels, edges)
    left = min((x - len(lb) * CHAR / 2 - 8 for (x, _), lb in zip(places, labels)), default=0)
    right = max((x + len(lb) * CHAR / 2 + 8 for (x, _), lb in zip(places, labels)), default=0)
    rows = max((layer for _, layer in places), default=0) + 1
    width = right - left + 2 * MARGIN
    height = rows * ROW + 2 * MARGIN
    ox = MARGIN - left

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="12" '
        f'role="img" aria-label="{html.escape(title)}">',
        f"<title>{html.escape(title)}</title>",
        '<g fill="none" stroke="#7a8290" stroke-opacity="0.55" stroke-width="1.2">',
    ]
    for u, v in edges:
        (xu, lu), (xv, lv) = places[u], places[v]
        yu = MARGIN + lu * ROW + BOX_HEIGHT
        yv = MARGIN + lv * ROW
        bend = (yv - yu) / 2
        out.append(
            f'<path d="M{xu + ox:.1f},{yu:.1f} C{xu + ox:.1f},{yu + bend:.1f} '
            f'{xv + ox:.1f},{yv - bend:.1f} {xv + ox:.1f},{yv:.1f}"/>'
        )
    out.append("</g>")
    for (x, layer), label, kind, tip in zip(places, labels, kinds, tips):
        w = len(label) * CHAR + 16
        top = MARGIN + layer * ROW
        endpoint = kind in ("input", "output")
        fill = ENDPOINT if endpoint else colour(kind)
        radius = BOX_HEIGHT / 2 if endpoint else 4
        text = "#222" if endpoint else "#fff"
        out.append(
            f"<g><title>{html.escape(tip)}</title>"
            f'<rect x="{x + ox - w / 2:.1f}" y="{top}" width="{w:.1f}" height="{BOX_HEIGHT}" '
            f'rx="{radius}" fill="{fill}" stroke="#4a4f57" stroke-width="{1 if endpoint else 0}"/>'
            f'<text x="{x + ox:.1f}" y="{top + 16}" text-anchor="middle" fill="{text}">'
            f"{html.escape(label)}</text></g>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
