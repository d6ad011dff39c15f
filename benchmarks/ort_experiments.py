"""ONNX Runtime CPU latency of edited GPT-2 small and ViT-B/16 exports against the unchanged ones.

    python benchmarks/ort_experiments.py --list                 # the variants
    python benchmarks/ort_experiments.py --profile              # where ONNX Runtime's time goes
    python benchmarks/ort_experiments.py --batches 8 --runs 15  # every variant, both models
    python benchmarks/ort_experiments.py --models vit --only fused-qkv,gelu-tanh-pow

The models are ``benchmarks/run.py``'s (random weights), except that the parameters Flax
initialises to a constant (biases, LayerNorm scales and offsets, ViT's class token and
positions) are made random too, so that an edit dropping or misplacing one shows in the
outputs. Each model is converted once at the default opset. A *variant* is that export
edited here with ``onnx.helper`` (the converter is not changed; an edit that finds
nothing to change is an error), an export at another opset, or the unchanged export run
with other session options.

Each variant is timed against the unchanged export in one process on the same inputs:
two warm-up calls each, then rounds of one call each, in the order A B, B A, A B ...
``ratio`` is the median over rounds of variant/unchanged (below 1: faster); the
``unchanged`` variant (a second session of the same file) is the noise floor, and
``jax.jit`` of the same function is a reference row. ``repeated`` counts rounds timed
again because other processes kept the machine busy. ``diff jax`` and ``diff base`` are
the largest absolute differences of the outputs from ``jax.jit``'s and from the unchanged
export's (rounding only, for an edit that keeps the function).

``--profile`` runs the unchanged export (or the ``--only`` variants) at the first of
``--batches`` with ONNX Runtime's profiler: each op type's share of the kernel time, the
MatMul and Gemm rate, the slowest nodes, and the ops ONNX Runtime runs after its fusions.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import build  # noqa: E402 - the same models as benchmarks/run.py

MODELS = ("gpt2", "vit")


# -- models ------------------------------------------------------------------------------


def model(name: str) -> tuple[Any, list[Any], Callable[[int], np.ndarray]]:
    """``run.py``'s model with its constant-initialised parameters made random."""
    import jax
    from flax import nnx

    module, specs, make_inputs = build(name, False)
    rng = np.random.default_rng(1)
    state = nnx.state(module, nnx.Param)

    def vary(leaf: Any) -> Any:
        value = np.asarray(leaf)
        if value.size > 1 and np.ptp(value) == 0:
            value = value + rng.normal(0, 0.1, value.shape).astype(value.dtype)
        return jax.numpy.asarray(value)

    nnx.update(module, jax.tree_util.tree_map(vary, state))
    return module, specs, lambda b: make_inputs(b)[0]


# -- graph edits ---------------------------------------------------------------------------


class Graph:
    """A graph's nodes as a Python list, with producers, consumers and constants."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        self.graph = proto.graph
        self.nodes = list(self.graph.node)
        self.inits = {i.name: i for i in self.graph.initializer}
        self.producer = {out: n for n in self.nodes for out in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = collections.defaultdict(list)
        for node in self.nodes:
            for name in node.input:
                self.consumers[name].append(node)
        self.names = 0
        self.sites = 0  # places an edit changed

    def fresh(self, stem: str) -> str:
        self.names += 1
        return f"edit_{stem}_{self.names}"

    def const(self, value: Any) -> str:
        name = self.fresh("c")
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.inits[name])

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> tuple[onnx.NodeProto, str]:
        out = self.fresh(op_type.lower())
        return helper.make_node(op_type, inputs, [out], **attrs), out

    def replace(self, old: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
        """Put ``new`` where ``old`` was: the list stays in topological order as long as
        ``new`` needs nothing computed after ``old``."""
        at = next(i for i, n in enumerate(self.nodes) if n is old)
        self.nodes[at : at + 1] = new


Edit = Callable[[onnx.ModelProto], None]


def graph_edit(fn: Callable[[Graph], None]) -> Edit:
    """Make ``fn`` a model edit: write the node list back, drop unused constants."""

    def edit(proto: onnx.ModelProto) -> None:
        g = Graph(proto)
        fn(g)
        if not g.sites:
            raise RuntimeError(f"{fn.__name__}: nothing to change in this graph")
        nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in g.nodes]
        g.graph.ClearField("node")
        g.graph.node.extend(nodes)
        used = {name for node in nodes for name in node.input}
        kept = [i for i in g.graph.initializer if i.name in used]
        g.graph.ClearField("initializer")
        g.graph.initializer.extend(kept)

    edit.__doc__ = fn.__doc__
    return edit


def attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    found = [a for a in node.attribute if a.name == name]
    return helper.get_attribute_value(found[0]) if found else default


def _gelus(g: Graph) -> list[onnx.NodeProto]:
    gelus = [n for n in g.nodes if n.op_type == "Gelu"]
    g.sites += len(gelus)
    return gelus


@graph_edit
def gelu_erf(g: Graph) -> None:
    """Gelu(approximate='tanh') -> Gelu(): the exact erf form, another function."""
    for node in _gelus(g):
        node.ClearField("attribute")


def _gelu_tanh(g: Graph, with_pow: bool) -> None:
    a, k = g.const(np.float32(0.044715)), g.const(np.float32(math.sqrt(2 / math.pi)))
    half, one, three = (g.const(np.float32(v)) for v in (0.5, 1.0, 3.0))
    for node in _gelus(g):
        x = node.input[0]
        if with_pow:
            cube = [g.op("Pow", [x, three])]
        else:
            cube = [g.op("Mul", [x, x])]
            cube.append(g.op("Mul", [x, cube[0][1]]))
        n1, ax3 = g.op("Mul", [a, cube[-1][1]])
        n2, inner = g.op("Add", [x, ax3])
        n3, scaled = g.op("Mul", [k, inner])
        n4, t = g.op("Tanh", [scaled])
        n5, t1 = g.op("Add", [one, t])
        if with_pow:  # (0.5 x) (1 + t)
            n6, hx = g.op("Mul", [x, half])
            last = helper.make_node("Mul", [hx, t1], [node.output[0]])
        else:  # x (0.5 (1 + t))
            n6, hx = g.op("Mul", [half, t1])
            last = helper.make_node("Mul", [x, hx], [node.output[0]])
        g.replace(node, [n for n, _ in cube] + [n1, n2, n3, n4, n5, n6, last])


@graph_edit
def gelu_tanh_jax(g: Graph) -> None:
    """Gelu -> x (0.5 (1 + tanh(k (x + 0.044715 x x x)))), JAX's own arithmetic."""
    _gelu_tanh(g, with_pow=False)


@graph_edit
def gelu_tanh_pow(g: Graph) -> None:
    """Gelu -> (0.5 x) (1 + tanh(k (x + 0.044715 Pow(x, 3)))), the arrangement of
    ONNX Runtime's FastGelu fusion."""
    _gelu_tanh(g, with_pow=True)


def _projection(g: Graph, name: str) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """The MatMul and Add computing ``name`` as x @ W + b, W and b constants used once."""
    add = g.producer.get(name)
    if add is None or add.op_type != "Add" or add.input[1] not in g.inits:
        return None
    matmul = g.producer.get(add.input[0])
    if matmul is None or matmul.op_type != "MatMul" or matmul.input[1] not in g.inits:
        return None
    if len(g.consumers[matmul.output[0]]) != 1 or len(g.inits[add.input[1]].dims) != 1:
        return None
    return matmul, add


@graph_edit
def fuse_qkv(g: Graph) -> None:
    """Attention's three projections of one input -> one MatMul + Add, then Split."""
    for attention in [n for n in g.nodes if n.op_type == "Attention"]:
        q = attention.input[0]
        div = g.producer.get(q)
        if div is not None and div.op_type == "Div":  # nnx scales the query itself
            q = div.input[0]
        pairs = [_projection(g, name) for name in (q, *attention.input[1:3])]
        if None in pairs or len({mm.input[0] for mm, _ in pairs}) != 1:
            continue
        if any(len(g.consumers[add.output[0]]) != 1 for _, add in pairs):
            continue
        weights = [g.array(mm.input[1]) for mm, _ in pairs]
        w = g.const(np.concatenate(weights, axis=1))
        b = g.const(np.concatenate([g.array(add.input[1]) for _, add in pairs]))
        sizes = g.const(np.array([part.shape[1] for part in weights], np.int64))
        n1, mm = g.op("MatMul", [pairs[0][0].input[0], w])
        n2, fused = g.op("Add", [mm, b])
        split = helper.make_node("Split", [fused, sizes], [a.output[0] for _, a in pairs], axis=-1)
        g.replace(pairs[0][0], [n1, n2, split])  # the first projection comes first
        for matmul, add in pairs:
            g.replace(add, [])
            if matmul is not pairs[0][0]:
                g.replace(matmul, [])
        g.sites += 1


@graph_edit
def split_qkv(g: Graph) -> None:
    """The converse, for GPT-2: MatMul + Add + Split -> three MatMul + Add."""
    for split in [n for n in g.nodes if n.op_type == "Split"]:
        pair = _projection(g, split.input[0])
        if pair is None or len(split.input) < 2 or attribute(split, "axis", 0) not in (-1, 2):
            continue
        matmul, add = pair
        at = np.cumsum(g.array(split.input[1]))[:-1]
        weights = np.split(g.array(matmul.input[1]), at, axis=1)
        biases = np.split(g.array(add.input[1]), at)
        nodes = []
        for w, b, out in zip(weights, biases, split.output):
            node, part = g.op("MatMul", [matmul.input[0], g.const(w)])
            nodes += [node, helper.make_node("Add", [part, g.const(b)], [out])]
        g.replace(split, nodes)
        g.replace(add, [])
        g.replace(matmul, [])
        g.sites += 1


@graph_edit
def scale_in_attention(g: Graph) -> None:
    """Div(q, sqrt(d)) -> Attention(q, scale=1/sqrt(d)): one elementwise pass fewer."""
    for attention in [n for n in g.nodes if n.op_type == "Attention"]:
        div = g.producer.get(attention.input[0])
        if div is None or div.op_type != "Div" or div.input[1] not in g.inits:
            continue
        if len(g.consumers[div.output[0]]) != 1 or g.array(div.input[1]).size != 1:
            continue
        scale = attribute(attention, "scale", None)
        if scale is None:
            continue
        kept = [a for a in attention.attribute if a.name != "scale"]
        attention.ClearField("attribute")
        attention.attribute.extend(kept)
        new_scale = float(scale / g.array(div.input[1]).item())
        attention.attribute.append(helper.make_attribute("scale", new_scale))
        attention.input[0] = div.input[0]
        g.replace(div, [])
        g.sites += 1


@graph_edit
def attention_4d(g: Graph) -> None:
    """Attention on (B, S, H*d) with q_num_heads -> Reshape and Transpose each input to
    (B, H, S, d), Attention without head counts, and back."""
    for attention in [n for n in g.nodes if n.op_type == "Attention"]:
        heads = attribute(attention, "q_num_heads")
        if heads is None or len(attention.input) != 3:
            continue
        kv_heads = attribute(attention, "kv_num_heads")
        nodes, inputs = [], []
        for name, h in zip(attention.input, (heads, kv_heads, kv_heads)):
            n1, split = g.op("Reshape", [name, g.const(np.array([0, 0, h, -1], np.int64))])
            n2, moved = g.op("Transpose", [split], perm=[0, 2, 1, 3])
            nodes += [n1, n2]
            inputs.append(moved)
        attrs = {
            a.name: helper.get_attribute_value(a)
            for a in attention.attribute
            if a.name not in ("q_num_heads", "kv_num_heads")
        }
        n3, out4 = g.op("Attention", inputs, **attrs)
        n4, back = g.op("Transpose", [out4], perm=[0, 2, 1, 3])
        joined = g.const(np.array([0, 0, -1], np.int64))
        last = helper.make_node("Reshape", [back, joined], [attention.output[0]])
        g.replace(attention, [*nodes, n3, n4, last])
        g.sites += 1


@graph_edit
def bias_in_gemm(g: Graph) -> None:
    """(B, S, K) MatMul + Add(bias) -> Reshape to 2-D, Gemm with the bias, Reshape back."""
    for matmul in [n for n in g.nodes if n.op_type == "MatMul"]:
        users = g.consumers[matmul.output[0]]
        w = g.inits.get(matmul.input[1])
        if len(users) != 1 or users[0].op_type != "Add" or w is None or len(w.dims) != 2:
            continue
        add = users[0]
        if add.input[1] not in g.inits or list(g.inits[add.input[1]].dims) != [w.dims[1]]:
            continue
        x = matmul.input[0]
        n1, flat = g.op("Reshape", [x, g.const(np.array([-1, w.dims[0]], np.int64))])
        n2, gemm = g.op("Gemm", [flat, matmul.input[1], add.input[1]])
        n3, lead = g.op("Shape", [x], end=-1)
        n4, shape = g.op("Concat", [lead, g.const(np.array([w.dims[1]], np.int64))], axis=0)
        last = helper.make_node("Reshape", [gemm, shape], [add.output[0]])
        g.replace(matmul, [n1, n2, n3, n4, last])
        g.replace(add, [])
        g.sites += 1


@graph_edit
def lm_head_matmul(g: Graph) -> None:
    """Reshape -> Gemm(transB=1) against the tied embedding -> Reshape, as one
    MatMul(x, Transpose(E)): ONNX Runtime folds the Transpose at load (a second copy of
    the table) and the logits are written in their final shape."""
    for gemm in [n for n in g.nodes if n.op_type == "Gemm" and len(n.input) == 2]:
        plain = [attribute(gemm, a, d) for a, d in (("transA", 0), ("transB", 0), ("alpha", 1))]
        before, after = g.producer.get(gemm.input[0]), g.consumers[gemm.output[0]]
        reshapes = [getattr(n, "op_type", "") for n in (before, *after)] == ["Reshape"] * 2
        if plain != [0, 1, 1] or not reshapes:
            continue
        n1, transposed = g.op("Transpose", [gemm.input[1]], perm=[1, 0])
        n2 = helper.make_node("MatMul", [before.input[0], transposed], [after[0].output[0]])
        g.replace(gemm, [n1, n2])
        g.replace(after[0], [])
        if len(g.consumers[before.output[0]]) == 1:
            g.replace(before, [])
        g.sites += 1


# -- variants ----------------------------------------------------------------------------

EXTENDED = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED  # all but layout changes
# name -> (models it applies to, a graph edit or another opset or None, session options)
VARIANTS: dict[str, tuple[tuple[str, ...], Edit | int | None, dict[str, Any]]] = {
    "unchanged": (MODELS, None, {}),
    "gelu-erf": (MODELS, gelu_erf, {}),
    "gelu-tanh-jax": (MODELS, gelu_tanh_jax, {}),
    "gelu-tanh-pow": (MODELS, gelu_tanh_pow, {}),
    "attention-opset22": (MODELS, 22, {}),
    "attention-4d": (MODELS, attention_4d, {}),
    "scale-in-attention": (("vit",), scale_in_attention, {}),
    "fused-qkv": (("vit",), fuse_qkv, {}),
    "split-qkv": (("gpt2",), split_qkv, {}),
    "bias-in-gemm": (MODELS, bias_in_gemm, {}),
    "lm-head-matmul": (("gpt2",), lm_head_matmul, {}),
    "threads-1": (MODELS, None, {"intra_op_num_threads": 1}),
    "no-spinning": (MODELS, None, {"config": {"session.intra_op.allow_spinning": "0"}}),
    "no-prepacking": (MODELS, None, {"config": {"session.disable_prepacking": "1"}}),
    "optimize-extended": (MODELS, None, {"graph_optimization_level": EXTENDED}),
}


def describe(variant: str) -> str:
    names, edit, options = VARIANTS[variant]
    if variant == "unchanged":
        what = "a second session of the unchanged export: the noise floor"
    elif isinstance(edit, int):
        what = f"the converter's export at opset {edit} (no Attention op: its decomposition)"
    elif edit is not None:
        what = " ".join(edit.__doc__.split())
    else:
        what = f"session options {options}"
    return f"{variant} ({', '.join(names)}): {what}"


def session(path: str, config: dict[str, str] | None = None, **options: Any):
    """A CPU session; ``options`` are ``SessionOptions`` attributes, ``config`` its entries."""
    settings = ort.SessionOptions()
    for key, value in options.items():
        setattr(settings, key, value)
    for key, value in (config or {}).items():
        settings.add_session_config_entry(key, value)
    return ort.InferenceSession(path, settings, providers=["CPUExecutionProvider"])


def write_variant(variant: str, module: Any, specs: list[Any], base: str, path: str) -> str:
    """The file the variant runs: ``base`` itself, an edited copy or another export."""
    import jax2onnx

    edit = VARIANTS[variant][1]
    if edit is None:
        return base
    if isinstance(edit, int):
        jax2onnx.to_onnx(module, specs, opset=edit, return_mode="file", output_path=path)
        return path
    proto = onnx.load(base)
    edit(proto)
    onnx.save(proto, path)
    return path


def runner(sess: ort.InferenceSession) -> Callable[[np.ndarray], np.ndarray]:
    name = sess.get_inputs()[0].name
    return lambda x: sess.run(None, {name: x})[0]


def busy() -> tuple[float, int, int]:
    """A mark: the time and the CPU ticks the machine and this process have been busy."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    with open("/proc/self/stat") as f:
        own = f.read().rsplit(")", 1)[1].split()  # from field 3 on; 14 and 15 are CPU time
    return time.perf_counter(), sum(ticks) - ticks[3] - ticks[4], int(own[11]) + int(own[12])


def others_since(mark: tuple[float, int, int]) -> float:
    """The share of the machine other processes have kept busy since ``mark``."""
    now = busy()
    capacity = (os.cpu_count() or 1) * os.sysconf("SC_CLK_TCK") * (now[0] - mark[0])
    return ((now[1] - mark[1]) - (now[2] - mark[2])) / capacity


def alternate(base: Callable, other: Callable, x: np.ndarray, runs: int) -> dict[str, float]:
    """``runs`` rounds of one timed call of each, in the order A B, B A, A B ..., after two
    warm-up calls. The machine may be shared: a round during which other processes kept
    more than 5% of it busy is timed again (at most ``runs`` times), once it is quiet."""
    for _ in range(2):
        base(x), other(x)
    times: dict[Callable, list[float]] = {base: [], other: []}
    repeated = 0
    while len(times[base]) < runs:
        mark, took = busy(), {}
        for call in (base, other) if len(times[base]) % 2 == 0 else (other, base):
            start = time.perf_counter()
            call(x)
            took[call] = time.perf_counter() - start
        if others_since(mark) > 0.05 and repeated < runs:
            repeated += 1
            for _ in range(15):  # wait (up to 15 s) for a quiet second
                mark = busy()
                time.sleep(1)
                if others_since(mark) < 0.05:
                    break
            continue
        for call, seconds in took.items():
            times[call].append(seconds)
    return {
        "base": statistics.median(times[base]),
        "other": statistics.median(times[other]),
        "ratio": statistics.median(o / b for b, o in zip(times[base], times[other])),
        "min ratio": min(times[other]) / min(times[base]),
        "repeated": repeated,
    }


def compare(name: str, batches: list[int], runs: int, variants: list[str]) -> list[list[str]]:
    """One row per variant and batch. At most two sessions are alive at once."""
    import jax

    import jax2onnx

    module, specs, make_input = model(name)
    jitted = jax.jit(jax2onnx.traced_callable(module))
    inputs = {b: make_input(b) for b in batches}
    want = {b: np.asarray(jitted(x)) for b, x in inputs.items()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base_path, path = os.path.join(tmp, "base.onnx"), os.path.join(tmp, "variant.onnx")
        jax2onnx.to_onnx(module, specs, return_mode="file", output_path=base_path)
        base = runner(session(base_path))
        got = {b: base(x) for b, x in inputs.items()}

        def measure(variant: str, call: Callable, nodes: str) -> None:
            for b, x in inputs.items():
                out = np.asarray(call(x))
                diffs = [float(np.max(np.abs(out - ref[b]))) for ref in (want, got)]
                t = alternate(base, call, x, runs)
                row = [name, variant, str(b), nodes, f"{t['other'] * 1e3:.1f}"]
                row += [f"{t['base'] * 1e3:.1f}", f"{t['ratio']:.3f}", f"{t['min ratio']:.3f}"]
                rows.append(row + [f"{d:.1e}" for d in diffs] + [str(t["repeated"])])
                print(" | ".join(rows[-1]), flush=True)

        if "jax" in variants:
            measure("jax.jit", lambda x: jax.block_until_ready(jitted(x)), "-")
        for variant in variants:
            if variant == "jax" or name not in VARIANTS[variant][0]:
                continue
            file = write_variant(variant, module, specs, base_path, path)
            nodes = len(onnx.load(file, load_external_data=False).graph.node)
            call = runner(session(file, **VARIANTS[variant][2]))
            measure(variant, call, str(nodes))
            del call
            gc.collect()
    return rows


# -- profile -------------------------------------------------------------------------------


def profile(name: str, variant: str, batch: int, runs: int) -> None:
    """Kernel time per op type over ``runs`` calls (a first, warm-up call left out)."""
    import jax2onnx

    module, specs, make_input = model(name)
    x = make_input(batch)
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.onnx")
        jax2onnx.to_onnx(module, specs, return_mode="file", output_path=base)
        path = write_variant(variant, module, specs, base, os.path.join(tmp, "variant.onnx"))
        exported = onnx.load(path, load_external_data=False).graph.node
        options = dict(VARIANTS[variant][2])
        config = options.pop("config", {})
        optimized = os.path.join(tmp, "optimized.onnx")  # the graph after ORT's fusions
        weights = {"session.optimized_model_external_initializers_file_name": "optimized.data"}
        session(path, {**config, **weights}, optimized_model_filepath=optimized, **options)
        ran = onnx.load(optimized, load_external_data=False).graph.node
        prefix = os.path.join(tmp, "profile")
        sess = session(path, config, enable_profiling=True, profile_file_prefix=prefix, **options)
        call = runner(sess)
        call(x)
        start = time.perf_counter()
        for _ in range(runs):
            call(x)
        wall = (time.perf_counter() - start) / runs
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    warm_up_end = sorted(e["ts"] for e in events if e.get("name") == "model_run")[1]
    by_op: collections.Counter[str] = collections.Counter()
    by_node: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    flops = matmul_us = 0
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        if event["ts"] < warm_up_end:
            continue
        op, args = event["args"]["op_name"], event["args"]
        by_op[op] += event["dur"]
        by_node[event["name"].removesuffix("_kernel_time")] += event["dur"]
        count[op] += 1
        if op in ("MatMul", "Gemm"):  # 2 M N K, K the last axis of the first input
            (out,) = args["output_type_shape"][0].values()
            (a,) = args["input_type_shape"][0].values()
            flops += 2 * math.prod(out) * a[-1]
            matmul_us += event["dur"]
    total = sum(by_op.values())
    print(f"\n{name}, {variant}, batch {batch}: {wall * 1e3:.0f} ms per call with the profiler")
    print(f"kernel time {total / 1e3 / runs:.0f} ms per call, over {runs} calls;", end=" ")
    print(f"MatMul and Gemm at {flops / matmul_us / 1e3:.0f} GFLOP/s")
    print("| op type | nodes | share | ms per call |\n|---|---|---|---|")
    for op, us in by_op.most_common():
        print(f"| {op} | {count[op] // runs} | {us / total:.1%} | {us / 1e3 / runs:.1f} |")
    slowest = ", ".join(f"{n} {us / total:.1%}" for n, us in by_node.most_common(6))
    print("slowest nodes:", slowest)
    print("exported:", dict(collections.Counter(n.op_type for n in exported).most_common()))
    after = collections.Counter(f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in ran)
    print("ONNX Runtime runs:", dict(after.most_common()))


# -- command line ----------------------------------------------------------------------


def arguments() -> argparse.ArgumentParser:
    """The command line (documented commands are checked against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="gpt2, vit or both")
    parser.add_argument("--batches", default="8,1", help="batch sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=15, help="timed calls of each session")
    parser.add_argument("--only", help="variants, comma-separated ('jax' for the jax.jit row)")
    parser.add_argument("--profile", action="store_true", help="profile (first batch size)")
    parser.add_argument("--list", action="store_true", help="describe the variants and stop")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    if args.list:
        for variant in VARIANTS:
            print(describe(variant))
        return 0
    names = args.models.split(",")
    if set(names) - set(MODELS):
        raise SystemExit(f"unknown --models {sorted(set(names) - set(MODELS))}; use {MODELS}")
    variants = args.only.split(",") if args.only else ["jax", *VARIANTS]
    unknown = set(variants) - set(VARIANTS) - {"jax"}
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; see --list")
    if args.profile:
        for name in names:
            for variant in args.only.split(",") if args.only else ["unchanged"]:
                if variant != "jax" and name in VARIANTS[variant][0]:
                    profile(name, variant, int(args.batches.split(",")[0]), args.runs)
        return 0
    header = ["model", "variant", "batch", "nodes", "variant ms", "unchanged ms", "ratio"]
    header += ["min ratio", "diff jax", "diff base", "repeated"]
    print(" | ".join(header), flush=True)
    rows = []
    for name in names:
        rows += compare(name, [int(b) for b in args.batches.split(",")], args.runs, variants)
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
