"""Conversion speed, memory and exported-model quality of the example Flax models.

    python benchmarks/run.py                     # the NNX models, full sizes
    python benchmarks/run.py --models mlp,cnn    # a subset
    python benchmarks/run.py --models linen      # the Linen models, each also through lax only
    python benchmarks/run.py --models equinox    # the Equinox models, each also through lax only
    python benchmarks/run.py --models nhwc       # channels-last CNNs as Haiku and Keras write them
    python benchmarks/run.py --small             # the test-suite configs (a smoke run)

A model named ``<name>@lax`` is converted with the flax plugin disabled
(``JAX2ONNX_DISABLE_PLUGINS=flax``): its layers decompose through the lax
lowerings, as every Linen model did before the Linen stand-ins; it is the
baseline the Linen rows are compared with. The Equinox models (``eqx-*``) have
the same pairs (``JAX2ONNX_DISABLE_PLUGINS=equinox``): each is the
``eqx.filter_vmap`` of an inference-mode copy, so both rows trace one function
and differ only in whether the ``eqx.nn`` layers are intercepted.

Each model is measured in a fresh Python process (so "first conversion" really
is the first in its process) and the parent prints one table and writes JSON
(``--json``, default ``benchmarks/results.json``). Every time is reported next
to a baseline measured in the same process:

- conversion vs the *floor*: ``jax.make_jaxpr`` of the function the converter
  traces plus ``onnx_ir.save`` of the model's weights alone (what any
  converter must at least do);
- ONNX Runtime CPU latency vs ``jax.jit`` latency on the same inputs (batch 1
  and 8, runs interleaved, medians);
- peak RSS increase during the first conversion vs the parameter bytes.

Nothing is downloaded: the models are built with random weights by
:mod:`jax2onnx_flax.models`, :mod:`jax2onnx_equinox.models` and, for the
channels-last CNNs (``nhwc-*``, plain JAX with a parameter dict, as Haiku
and Keras models are), ``benchmarks/nhwc_models.py``. The "Transposes"
column counts the layout changes left in the graph: a channels-last CNN
needs one, at its input.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

MODELS = ("mlp", "cnn", "gpt2", "vit")
# Linen models (jax2onnx_flax.linen_models), bound to their variables; "linen" names them all,
# each followed by its lax-only baseline (ToNNX has none: without the plugin it cannot trace).
LINEN = ("linen-resnet", "linen-resnet-tonnx", "linen-encoder", "linen-lstm")
# Equinox models (jax2onnx_equinox.models), mapped over the batch; "equinox" names them all,
# each followed by its lax-only baseline.
EQUINOX = ("eqx-mlp", "eqx-vit", "eqx-gpt2", "eqx-moe")
# Channels-last CNNs in plain JAX (benchmarks/nhwc_models.py); "nhwc" names them all.
NHWC = ("nhwc-resnet18", "nhwc-mobilenet")
# Large models, run when named with --models: a >2 GiB float32 MLP (external data)
# and the same MLP with bfloat16 weights (stored as bfloat16).
LARGE = ("mlp-2g", "mlp-bf16")
LARGE_WIDTH, LARGE_DEPTH = 8192, 9  # 9 x 8192 x 8192 weights: 604M parameters
GPT2_TOKENS = 128


def build(name: str, small: bool) -> tuple[Any, list[Any], Any]:
    """The module, the ``to_onnx`` input specs and a function making inputs for a batch."""
    import jax
    import numpy as np

    from jax2onnx_flax import models

    rng = np.random.default_rng(0)
    if name == "mlp":
        config = models.MLPConfig()
        return (
            models.mlp(config),
            [("B", config.in_features)],
            lambda b: [rng.standard_normal((b, config.in_features)).astype(np.float32)],
        )
    if name == "cnn":
        config = models.CNNConfig() if small else models.CNNConfig.mnist()
        shape = (config.image, config.image, config.channels)
        return (
            models.cnn(config),
            [("B", *shape)],
            lambda b: [rng.standard_normal((b, *shape)).astype(np.float32)],
        )
    if name == "gpt2":
        config = models.GPTConfig() if small else models.GPTConfig.gpt2_small()
        tokens = config.max_len if small else GPT2_TOKENS
        spec = jax.ShapeDtypeStruct(("B", tokens), np.int32)
        return (
            models.gpt2(config),
            [spec],
            lambda b: [rng.integers(0, config.vocab, (b, tokens)).astype(np.int32)],
        )
    if name == "vit":
        config = models.ViTConfig() if small else models.ViTConfig.base16()
        shape = (config.image, config.image, config.channels)
        return (
            models.vit(config),
            [("B", *shape)],
            lambda b: [rng.standard_normal((b, *shape)).astype(np.float32)],
        )
    if name in LARGE:
        import jax.numpy as jnp
        from flax import nnx

        dtype = jnp.bfloat16 if name == "mlp-bf16" else jnp.float32
        rngs = nnx.Rngs(0)
        layers = []
        for i in range(LARGE_DEPTH):
            layers.append(
                nnx.Linear(LARGE_WIDTH, LARGE_WIDTH, param_dtype=dtype, use_bias=True, rngs=rngs)
            )
            if i < LARGE_DEPTH - 1:
                layers.append(nnx.relu)
        return (
            nnx.Sequential(*layers),
            [("B", LARGE_WIDTH)],
            lambda b: [rng.standard_normal((b, LARGE_WIDTH)).astype(np.float32)],
        )
    if name in LINEN:
        return _linen(name, small, rng)
    if name in EQUINOX:
        return _equinox(name, small, rng)
    if name in NHWC:
        return _nhwc(name, small, rng)
    known = ", ".join((*MODELS, *LARGE, *LINEN, *EQUINOX, *NHWC))
    raise SystemExit(f"unknown model {name!r}; choose from {known}")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _floor(fn: Any, specs: list[Any], weights: list[Any], directory: str) -> float:
    """``make_jaxpr`` of the traced function plus saving the weights alone."""
    import jax
    import numpy as np
    import onnx_ir as ir

    from jax2onnx.conversion.specs import normalize_inputs

    start = time.perf_counter()
    spec = normalize_inputs(specs, None, double=False)
    jax.make_jaxpr(fn)(*spec.all_specs)
    values = []
    for i, w in enumerate(weights):
        tensor = ir.Tensor(np.asarray(w), name=f"w{i}")
        values.append(
            ir.Value(
                name=f"w{i}",
                type=ir.TensorType(tensor.dtype),
                shape=tensor.shape,
                const_value=tensor,
            )
        )
    graph = ir.Graph([], [], nodes=[], initializers=values, opset_imports={"": 23})
    model = ir.Model(graph, ir_version=10)
    path = os.path.join(directory, "floor.onnx")
    if sum(np.asarray(w).nbytes for w in weights) > 2**31 - 2**20:  # protobuf's limit
        ir.save(model, path, external_data="floor.onnx.data")
    else:
        ir.save(model, path)
    return time.perf_counter() - start


def _latencies(session: Any, names: list[str], jitted: Any, inputs: list[Any], runs: int):
    import jax

    feed = dict(zip(names, inputs))
    session.run(None, feed)
    jax.block_until_ready(jitted(*inputs))
    ort_times, jax_times = [], []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        ort_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        jax.block_until_ready(jitted(*inputs))
        jax_times.append(time.perf_counter() - start)
    return statistics.median(ort_times), statistics.median(jax_times)


class _StepTimes:
    """A logging handler keeping the per-step times of the last ``to_onnx`` call."""

    def __init__(self) -> None:
        import logging

        self.last: dict[str, float] = {}
        handler = logging.Handler(logging.DEBUG)
        handler.emit = self._emit
        logger = logging.getLogger("jax2onnx")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)

    def _emit(self, record: Any) -> None:
        self.last = dict(getattr(record, "jax2onnx_timings", {}))


def _linen(name: str, small: bool, rng: Any) -> tuple[Any, list[Any], Any]:
    import jax
    import numpy as np

    from jax2onnx_flax import linen_models as lm

    if name.startswith("linen-resnet"):
        config = lm.ResNetConfig() if small else lm.ResNetConfig.resnet18()
        module, variables = lm.resnet(config)
        shape = (config.image, config.image, config.channels)
        target = module.bind(variables)
        if name.endswith("tonnx"):
            from flax import nnx

            target = nnx.bridge.ToNNX(module, rngs=nnx.Rngs(0))
            nnx.bridge.lazy_init(target, np.ones((1, *shape), np.float32))
            nnx.update(target, nnx.bridge.variables.linen_vars_to_nnx_attrs(variables))
        return (
            target,
            [("B", *shape)],
            lambda b: [rng.standard_normal((b, *shape)).astype(np.float32)],
        )
    if name == "linen-encoder":
        config = lm.EncoderConfig() if small else lm.EncoderConfig.base()
        module, variables = lm.encoder(config)
        spec = jax.ShapeDtypeStruct(("B", config.max_len), np.int32)
        return (
            module.bind(variables),
            [spec],
            lambda b: [rng.integers(0, config.vocab, (b, config.max_len)).astype(np.int32)],
        )
    config = lm.LSTMConfig() if small else lm.LSTMConfig(vocab=10000, dim=128, hidden=256)
    module, variables = lm.lstm(config)
    steps = 5 if small else 64
    return (
        module.bind(variables),
        [jax.ShapeDtypeStruct(("B", steps), np.int32)],
        lambda b: [rng.integers(0, config.vocab, (b, steps)).astype(np.int32)],
    )


def _equinox(name: str, small: bool, rng: Any) -> tuple[Any, list[Any], Any]:
    import equinox as eqx
    import jax
    import numpy as np

    from jax2onnx_equinox import models as em

    if name == "eqx-mlp":
        config = em.MLPConfig() if small else em.MLPConfig.wide()
        model, shape = em.mlp(config), (config.in_features,)
    elif name == "eqx-vit":
        config = em.ViTConfig() if small else em.ViTConfig.dinov2_small()
        model, shape = em.vit(config), (config.channels, config.image, config.image)
    elif name == "eqx-moe":
        config = em.MoEConfig() if small else em.MoEConfig.mixtral_like()
        model, shape = em.moe(config), (16, config.dim)
    else:
        config = em.GPTConfig() if small else em.GPTConfig.gpt2_small()
        tokens = 8 if small else GPT2_TOKENS
        batched = eqx.filter_vmap(eqx.nn.inference_mode(em.gpt(config)))
        return (
            batched,
            [jax.ShapeDtypeStruct(("B", tokens), np.int32)],
            lambda b: [rng.integers(0, config.vocab, (b, tokens)).astype(np.int32)],
        )
    return (
        eqx.filter_vmap(eqx.nn.inference_mode(model)),
        [("B", *shape)],
        lambda b: [rng.standard_normal((b, *shape)).astype(np.float32)],
    )


def _nhwc(name: str, small: bool, rng: Any) -> tuple[Any, list[Any], Any]:
    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nhwc_models as nm

    build_model, full, reduced = {
        "nhwc-resnet18": (nm.resnet, nm.RESNET18, nm.RESNET_SMALL),
        "nhwc-mobilenet": (nm.mobilenet, nm.MOBILENET, nm.MOBILENET_SMALL),
    }[name]
    config = reduced if small else full
    model = build_model(config)
    shape = (config.image, config.image, config.channels)
    return (
        model,
        [("B", *shape)],
        lambda b: [rng.standard_normal((b, *shape)).astype(np.float32)],
    )


def _weights(module: Any) -> list[Any]:
    """The arrays a model stores: an NNX module's parameters and statistics, a bound
    Linen module's variables, an Equinox module's array leaves, a plain model's
    parameter dict."""
    import jax

    if isinstance(getattr(module, "params", None), dict):
        return list(module.params.values())
    if type(module).__module__.startswith("equinox"):
        leaves = jax.tree_util.tree_leaves(module)
    elif hasattr(module, "variables") and hasattr(module, "unbind"):
        leaves = jax.tree_util.tree_leaves(module.variables)
    else:
        from flax import nnx

        leaves = jax.tree_util.tree_leaves(nnx.state(module, nnx.Param, nnx.BatchStat))
    return [leaf for leaf in leaves if hasattr(leaf, "nbytes")]


def measure(name: str, small: bool, runs: int) -> dict[str, Any]:
    """Everything about one model, in this (fresh) process."""
    start = time.perf_counter()
    import jax

    t_jax = time.perf_counter() - start
    start = time.perf_counter()
    import jax2onnx

    t_import = time.perf_counter() - start
    import collections

    import numpy as np
    import onnx
    import onnxruntime as ort

    module, specs, make_inputs = build(name.removesuffix("@lax"), small)
    weights = _weights(module)
    jax.block_until_ready(weights)  # initialisation is asynchronous: finish it before measuring
    param_bytes = int(sum(w.nbytes for w in weights))
    params = int(sum(w.size for w in weights))
    result: dict[str, Any] = {"model": name, "params": params, "param_bytes": param_bytes}
    result["import_jax_s"] = t_jax
    result["import_jax2onnx_s"] = t_import

    steps = _StepTimes()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        peak_ok = _reset_peak()
        rss_before = _rss()
        start = time.perf_counter()
        jax2onnx.to_onnx(module, specs, return_mode="file", output_path=path)
        result["first_s"] = time.perf_counter() - start
        result["first_steps"] = steps.last
        result["peak_rss_increase"] = (_peak_rss() - rss_before) if peak_ok else None
        start = time.perf_counter()
        jax2onnx.to_onnx(module, specs, return_mode="file", output_path=path)
        result["second_s"] = time.perf_counter() - start
        result["second_steps"] = steps.last
        traced = jax2onnx.traced_callable(module)
        _floor(traced, specs, weights, tmp)  # warm
        result["floor_s"] = _floor(traced, specs, weights, tmp)

        model = onnx.load(path, load_external_data=False)
        result["file_bytes"] = sum(
            os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp) if f.startswith(name)
        )
        result["external_data"] = os.path.exists(path + ".data")
        result["weight_dtypes"] = dict(
            collections.Counter(
                onnx.helper.tensor_dtype_to_np_dtype(i.data_type).name
                for i in model.graph.initializer
            )
        )
        ops = collections.Counter(n.op_type for n in model.graph.node)
        result["nodes"] = sum(ops.values())
        result["functions"] = len(model.functions)
        result["ops"] = dict(ops.most_common())
        seen: dict[bytes, int] = {}
        duplicated = 0
        for init in model.graph.initializer:
            key = (init.data_type, tuple(init.dims), init.raw_data)
            if key in seen:
                duplicated += len(init.raw_data)
            seen[key] = 1
        result["duplicated_const_bytes"] = duplicated
        try:
            onnx.checker.check_model(path, full_check=True)
            result["checker"] = "ok"
        except Exception as err:  # noqa: BLE001 - reported, not raised
            result["checker"] = f"{type(err).__name__}: {str(err)[:200]}"

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        jitted = jax.jit(traced)
        worst = 0.0
        for batch in (1, 8):
            inputs = make_inputs(batch)
            got = session.run(None, dict(zip(names, inputs)))
            want = [np.asarray(x) for x in jax.tree_util.tree_leaves(jitted(*inputs))]
            for g, w in zip(got, want):
                worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w))))
            ort_s, jax_s = _latencies(session, names, jitted, inputs, runs)
            result[f"ort_b{batch}_s"] = ort_s
            result[f"jax_b{batch}_s"] = jax_s
        result["max_abs_diff"] = worst
    return result


def _row(r: dict[str, Any]) -> list[str]:
    mib = 2**20
    peak = r.get("peak_rss_increase")
    return [
        r["model"],
        f"{r['params'] / 1e6:.1f}M",
        f"{r['first_s']:.2f} ({r['first_s'] / r['floor_s']:.1f}x)",
        f"{r['floor_s']:.2f}",
        f"{r['second_s']:.2f} ({r['second_s'] / r['floor_s']:.2f}x)",
        "n/a" if peak is None else f"{peak / mib:.0f} MiB ({peak / r['param_bytes']:.2f}x)",
        str(r["nodes"]),
        str(r["ops"].get("Transpose", 0)),
        str(r["duplicated_const_bytes"]),
        r["checker"],
        _latency(r, 1),
        _latency(r, 8),
        f"{r['max_abs_diff']:.2g}",
    ]


def _latency(r: dict[str, Any], batch: int) -> str:
    ort_s, jax_s = r[f"ort_b{batch}_s"], r[f"jax_b{batch}_s"]
    return f"{ort_s * 1e3:.2f}/{jax_s * 1e3:.2f} ms ({ort_s / jax_s:.2f}x)"


HEADER = [
    "model",
    "params",
    "first s (/floor)",
    "floor s",
    "second s (/floor)",
    "peak RSS +",
    "nodes",
    "Transposes",
    "dup const B",
    "checker",
    "ORT/JAX b1",
    "ORT/JAX b8",
    "max |diff|",
]


def table(results: list[dict[str, Any]]) -> str:
    rows = [HEADER, ["---"] * len(HEADER), *(_row(r) for r in results)]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


STEPS = ["plugins", "prepare", "trace", "lower", "passes", "serialize"]


def steps_table(results: list[dict[str, Any]]) -> str:
    """Where each conversion's time went, step by step (from jax2onnx's debug log)."""
    rows = [["model", "call", *STEPS], ["---"] * (len(STEPS) + 2)]
    for r in results:
        for call in ("first", "second"):
            times = r.get(f"{call}_steps") or {}
            rows.append([r["model"], call, *(f"{times.get(s, 0.0):.3f}" for s in STEPS)])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def _user_env() -> dict[str, str]:
    """Measure what a user sees: bytecode caches written and used.

    With ``PYTHONDONTWRITEBYTECODE`` set every fresh process compiles every
    module again; the parent drops it and warms the caches once first.
    """
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _import_overhead(repeats: int = 7) -> dict[str, float]:
    """Median time of ``import jax`` and of ``import jax, jax2onnx`` in fresh processes.

    The two commands alternate after one warm-up run of each, so both see the same
    state of the file system cache.
    """
    env = _user_env()

    def timed(code: str) -> float:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import time; s=time.perf_counter(); {code}; print(time.perf_counter()-s)",
            ],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        return float(out.stdout.strip().splitlines()[-1])

    commands = {"base": "import jax", "both": "import jax, jax2onnx"}
    samples: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(repeats + 1):
        for key, code in commands.items():
            samples[key].append(timed(code))
    base = statistics.median(samples["base"][1:])
    both = statistics.median(samples["both"][1:])
    return {"import_jax_s": base, "import_jax_and_jax2onnx_s": both, "overhead_s": both - base}


_EQX_LAX = {f"{m}@lax" for m in EQUINOX}


def arguments() -> argparse.ArgumentParser:
    """The command line (the docs test checks documented commands against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--small", action="store_true", help="test-suite configs (smoke run)")
    parser.add_argument("--runs", type=int, default=20, help="latency runs per batch size")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def selected(models: str) -> list[str]:
    """The runs ``--models`` asks for (``linen``/``equinox`` expand to models and baselines)."""
    names = models.split(",")
    known = {*MODELS, *LINEN, *EQUINOX, *LARGE, *NHWC, "linen", "equinox", "nhwc"}
    unknown = [n for n in names if n.removesuffix("@lax") not in known]
    if unknown:
        raise SystemExit(f"unknown --models {unknown}; choose from {sorted(known)}")
    if "linen" in names:
        at = names.index("linen")
        # ToNNX has no lax-only baseline: without the plugin it fails (TraceContextError)
        names[at : at + 1] = [
            n for m in LINEN for n in ((m,) if m.endswith("tonnx") else (m, f"{m}@lax"))
        ]
    if "equinox" in names:
        at = names.index("equinox")
        names[at : at + 1] = [n for m in EQUINOX for n in (m, f"{m}@lax")]
    if "nhwc" in names:
        at = names.index("nhwc")
        names[at : at + 1] = list(NHWC)
    return names


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.small, args.runs)))
        return 0
    names = selected(args.models)
    env = _user_env()
    subprocess.run(
        [sys.executable, "-c", "import jax2onnx, flax.nnx, onnxruntime; jax2onnx.plugins()"],
        check=True,
        env=env,
    )
    results = []
    for name in names:
        command = [sys.executable, __file__, "--child", name, "--runs", str(args.runs)]
        if args.small:
            command.append("--small")
        child_env = dict(env)
        if name.endswith("@lax"):
            child_env["JAX2ONNX_DISABLE_PLUGINS"] = "equinox" if name in _EQX_LAX else "flax"
        done = subprocess.run(command, capture_output=True, text=True, env=child_env)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-3000:]}", file=sys.stderr)
            return 1
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{name}: done", file=sys.stderr)
    imports = _import_overhead()
    print(
        f"import jax2onnx adds {imports['overhead_s']:.3f} s to import jax "
        f"({imports['import_jax_s']:.2f} s), medians of 7 alternating fresh processes"
    )
    print(table(results))
    print()
    print("seconds per step:")
    print(steps_table(results))
    with open(args.json, "w") as f:
        json.dump({"imports": imports, "models": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
