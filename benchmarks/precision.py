"""bfloat16 models: the precision step's Casts, ONNX Runtime CPU, accuracy and speed.

    python benchmarks/precision.py              # every example
    python benchmarks/precision.py --runs 50 --only mlp-bf16

Each example computes in bfloat16: the mixed-precision Flax NNX decoder of
``packages/jax2onnx-flax/tests/test_mixed_precision.py`` (bfloat16 compute,
float32 parameters), the Keras 3 ``mixed_bfloat16`` model of
``tests/test_keras_mixed_precision.py`` (when Keras is installed) and a plain
``jnp`` MLP with bfloat16 weights. Each is converted twice in one process:
``native_half_precision=True`` (every bfloat16 op kept, for runtimes with
bfloat16 kernels) and the default (ops ONNX Runtime CPU has no bfloat16 kernel
for computed in float32 between Casts). The table gives both models' nodes and
Casts, whether ONNX Runtime CPU loads each, the default model's largest
absolute difference from ``jax.jit`` of the same function, and its latency
against ``jax.jit`` on the same input (calls alternating after a warm-up;
medians; ONNX Runtime through ``jax2onnx.plugin.run_session``, which feeds and
reads bfloat16).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import jax2onnx  # noqa: E402
from jax2onnx.plugin import run_session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

BF16 = np.dtype(ml_dtypes.bfloat16)


def _from_file(path: Path, name: str):
    """A module of the test suite, imported by path (its example models)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nnx_decoder():
    tests = _from_file(
        ROOT / "packages/jax2onnx-flax/tests/test_mixed_precision.py", "nnx_mixed_precision"
    )
    model = tests.decoder()
    return (lambda ids: model(ids)), [tests.TOKENS], tests.tokens(8)


def keras_mixed():
    tests = _from_file(ROOT / "tests/test_keras_mixed_precision.py", "keras_mixed_precision")
    model = tests.keras_model()
    model(tests.inputs(1))
    fn, specs = tests.keras_function(model)
    return fn, specs, tests.inputs(8)


def mlp_bf16():
    """Three Dense layers with bfloat16 weights and a GELU, computing in bfloat16."""
    rng = np.random.default_rng(0)
    sizes = (256, 512, 512, 10)
    params = [
        (
            jnp.asarray(rng.standard_normal((m, n)) / np.sqrt(m), jnp.bfloat16),
            jnp.asarray(rng.standard_normal(n) * 0.1, jnp.bfloat16),
        )
        for m, n in zip(sizes, sizes[1:])
    ]

    def fn(x):
        for i, (w, b) in enumerate(params):
            x = x @ w + b
            if i < len(params) - 1:
                x = jax.nn.gelu(x)
        return x

    x = rng.standard_normal((32, sizes[0])).astype(BF16)
    return fn, [jax.ShapeDtypeStruct(("B", sizes[0]), jnp.bfloat16)], x


def _keras_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("keras") is not None


EXAMPLES = {"nnx-decoder": nnx_decoder, "keras-mixed-bf16": keras_mixed, "mlp-bf16": mlp_bf16}


def _session(proto):
    try:
        return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - the table says "no"
        return None


def measure(name: str, runs: int) -> dict[str, str]:
    fn, specs, x = EXAMPLES[name]()
    native = jax2onnx.to_onnx(fn, specs, native_half_precision=True)
    default = jax2onnx.to_onnx(fn, specs)
    nodes = [len(p.graph.node) for p in (native, default)]
    casts = [sum(n.op_type == "Cast" for n in p.graph.node) for p in (native, default)]
    sessions = [_session(p) for p in (native, default)]
    session = sessions[1]
    row = {
        "example": name,
        "nodes native/default": f"{nodes[0]}/{nodes[1]}",
        "Casts native/default": f"{casts[0]}/{casts[1]}",
        "ORT CPU loads native/default": "/".join("yes" if s else "no" for s in sessions),
        "max abs diff": "-",
        "ORT/JAX": "-",
    }
    if session is None:
        return row
    jitted = jax.jit(fn)
    want = np.asarray(jitted(x)).astype(np.float32)
    input_name = session.get_inputs()[0].name
    (got,) = run_session(session, {input_name: x})
    scale = float(np.max(np.abs(want)))
    row["max abs diff"] = (
        f"{float(np.max(np.abs(got.astype(np.float32) - want))):.1e} (of {scale:.1f})"
    )
    row["ORT/JAX"] = _latencies(session, input_name, jitted, x, runs)
    return row


def _latencies(session, input_name: str, jitted, x: np.ndarray, runs: int) -> str:
    """benchmarks/run.py's interleaved timing, through ``run_session`` (the models read
    or give bfloat16, which ``session.run`` cannot)."""
    import statistics
    import time

    feed = {input_name: x}
    run_session(session, feed)
    jax.block_until_ready(jitted(x))
    ort_times, jax_times = [], []
    for _ in range(runs):
        start = time.perf_counter()
        run_session(session, feed)
        ort_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        jax.block_until_ready(jitted(x))
        jax_times.append(time.perf_counter() - start)
    ort_ms, jax_ms = statistics.median(ort_times) * 1e3, statistics.median(jax_times) * 1e3
    return f"{ort_ms:.3f}/{jax_ms:.3f} ms ({ort_ms / jax_ms:.2f}x)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--only", help="comma-separated example names: " + ", ".join(EXAMPLES))
    args = parser.parse_args(argv)
    wanted = args.only.split(",") if args.only else list(EXAMPLES)
    if "keras-mixed-bf16" in wanted and not _keras_available():
        print("keras-mixed-bf16: skipped (Keras 3 is not installed)", file=sys.stderr)
        wanted.remove("keras-mixed-bf16")
    rows = [measure(n, args.runs) for n in wanted]
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(row.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
