"""MkDocs hook: the examples gallery, generated while the site builds.

Each entry is one of our plugins' example-model cases, converted as the test
suite converts it (float32, static shapes, the case's opset). The page shows
what the export holds (node counts, an op histogram, parameters) and a
picture of the graph (``graph_svg``); nothing is fetched from the network.
A model that fails to convert fails the build.
"""

from __future__ import annotations

import collections
import importlib.util
import pathlib

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
PAGE = "gallery/index.md"

# (plugin, case name, title, what it shows)
GALLERY = [
    ("flax", "mlp", "Flax NNX: MLP with BatchNorm and Dropout",
     "Linear layers become Gemm; inference-mode BatchNorm is one BatchNormalization."),
    ("flax", "cnn", "Flax NNX: CNN",
     "Convolutions and pooling written channels-last; the layout pass keeps Transposes at "
     "the edges."),
    ("flax", "vit", "Flax NNX: Vision Transformer",
     "Patch embedding as one Conv, LayerNormalization, one Attention per block, Gelu."),
    ("flax", "gpt2", "Flax NNX: GPT-2 style decoder",
     "Token and position embeddings as Gather, causal Attention, tied output projection."),
    ("flax", "encoder_decoder", "Flax NNX: encoder-decoder transformer",
     "Self- and cross-attention, each one Attention op."),
    ("flax", "linen_resnet", "Flax Linen: ResNet block stack",
     "Linen Conv and BatchNorm with running statistics, residual adds."),
    ("flax", "linen_encoder", "Flax Linen: transformer encoder",
     "Linen MultiHeadDotProductAttention as Attention, LayerNorm as LayerNormalization."),
    ("flax", "linen_lstm", "Flax Linen: LSTM over a sequence",
     "nn.RNN's scan becomes one Loop; the cell's two Gemms run inside it."),
    ("equinox", "model_mlp", "Equinox: MLP under jax.vmap",
     "eqx.nn.Linear written for one example, batched by vmap into Gemm."),
    ("equinox", "model_cnn", "Equinox: CNN with BatchNorm state",
     "Channels-first convolutions and pools; BatchNorm reads the state's statistics."),
    ("equinox", "model_vit", "Equinox: Vision Transformer",
     "eqx.nn.MultiheadAttention as Attention, LayerNorm as LayerNormalization."),
    ("equinox", "model_gpt", "Equinox: GPT with rotary embeddings",
     "RotaryEmbedding and causal Attention ops."),
    ("equinox", "model_moe", "Equinox: mixture of experts",
     "An ensemble of experts made with filter_vmap: one Einsum per layer."),
    ("equinox", "model_neural_ode", "Equinox + diffrax: neural ODE",
     "A Tsit5 solve with a fixed step count: the time stepping is one Loop."),
]  # fmt: skip


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"jax2onnx_docs_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _count_nodes(graph) -> int:
    total = 0
    for node in graph.node:
        total += 1
        for attribute in node.attribute:
            if attribute.g.node:
                total += _count_nodes(attribute.g)
            for sub in attribute.graphs:
                total += _count_nodes(sub)
    return total


def _histogram(graph, counts: collections.Counter) -> None:
    for node in graph.node:
        counts[node.op_type] += 1
        for attribute in node.attribute:
            if attribute.g.node:
                _histogram(attribute.g, counts)
            for sub in attribute.graphs:
                _histogram(sub, counts)


def _shape(value) -> str:
    dims = [d.dim_param or str(d.dim_value) for d in value.type.tensor_type.shape.dim]
    import onnx

    dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name
    return f"{dtype}[{', '.join(dims)}]"


def _convert(plugin: str, name: str):
    import jax

    import jax2onnx
    from jax2onnx_testkit.check import case_specs

    loaded = {p.name: p for p in jax2onnx.plugins().plugins}
    if plugin not in loaded:
        raise RuntimeError(f"the gallery needs the {plugin} plugin (pip install '.[docs]')")
    found = [c for _, c in loaded[plugin].rules.cases if c.name == name]
    if not found:
        raise RuntimeError(f"the gallery names {plugin}/{name}, which is not a case")
    case = found[0]
    sizes = {s: case.sizes(s)[0] for s in case.symbols}
    fn = case.fn() if case.factory else case.fn
    with jax.enable_x64(False):
        return jax2onnx.to_onnx(
            fn, case_specs(case, "f32", sizes), input_params=case.input_params,
            opset=case.opset or 23,
        )  # fmt: skip


def build() -> tuple[str, dict[str, str]]:
    """The gallery page's Markdown and its pictures (file name -> SVG text)."""
    graph_svg = _load("graph_svg")
    lines = [
        "# Examples gallery",
        "",
        "The example models of our plugins' test cases, converted while this site was built",
        "(float32, static shapes, random weights) — the same conversions the test suite",
        "checks against JAX in ONNX Runtime. Each picture shows the top-level graph (weights",
        "and `Constant` nodes left out; a `Loop` or `If` is one box, its body counted in the",
        "node totals). Click a picture for full size; hover a box for the node's name.",
        "",
        "Colours: <span style='color:#4f6bed'>■</span> matrix products and convolutions,",
        "<span style='color:#2e9d5b'>■</span> normalizations,",
        "<span style='color:#e5862d'>■</span> activations,",
        "<span style='color:#d64545'>■</span> attention and rotary embeddings,",
        "<span style='color:#c9a227'>■</span> pooling and reductions,",
        "<span style='color:#8d96a3'>■</span> shape and indexing,",
        "<span style='color:#8a63c9'>■</span> control flow,",
        "<span style='color:#5aa6c8'>■</span> arithmetic.",
        "",
        "| model | nodes | parameters |",
        "|---|---|---|",
    ]
    sections: list[str] = []
    pictures: dict[str, str] = {}
    for plugin, name, title, about in GALLERY:
        proto = _convert(plugin, name)
        graph = proto.graph
        counts: collections.Counter = collections.Counter()
        _histogram(graph, counts)
        parameters = sum(int(np.prod(t.dims)) for t in graph.initializer)
        size = sum(len(t.raw_data) for t in graph.initializer) / 2**20
        anchor = name.replace("_", "-")
        lines.append(f"| [{title}](#{anchor}) | {_count_nodes(graph)} | {parameters:,} |")
        histogram = ", ".join(f"{op} {n}" for op, n in sorted(counts.items(), key=lambda c: -c[1]))
        picture = f"{plugin}-{name}.svg"
        pictures[picture] = graph_svg.render(graph, title)
        top = sum(1 for n in graph.node if n.op_type != "Constant")
        sections += [
            f"## {title} {{#{anchor}}}",
            "",
            about,
            f"Case `{plugin}/{name}`.",
            "",
            f"- inputs: {', '.join(f'`{v.name}` {_shape(v)}' for v in graph.input)}",
            f"- outputs: {', '.join(f'`{v.name}` {_shape(v)}' for v in graph.output)}",
            f"- nodes: {_count_nodes(graph)} in all, {top} at the top level besides constants",
            f"- parameters: {parameters:,} in {len(graph.initializer)} initializers "
            f"({size:.2f} MiB)",
            f"- ops: {histogram}",
            "",
            f"[![{title}: graph]({picture})]({picture})",
            "",
        ]
    return "\n".join([*lines, "", *sections]), pictures


def on_files(files, config):
    """Add the generated gallery page and its pictures to the site's files."""
    from mkdocs.structure.files import File

    page, pictures = build()
    files.append(File.generated(config, PAGE, content=page))
    for name, svg in pictures.items():
        files.append(File.generated(config, f"gallery/{name}", content=svg))
    return files
