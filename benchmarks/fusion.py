"""The fusion pass on models written as third-party libraries write them, before and after.

    python benchmarks/fusion.py                  # bert, llama and GPT-2 small's conversion time
    python benchmarks/fusion.py --runs 30 --batch 8

For each model of ``benchmarks/third_party_models.py`` (random weights,
symbolic batch, opset 23) the script converts twice in one process, with
the fusion pass (``jax2onnx.passes.fusion``) switched off and on, and
reports, as ratios after/before measured in the same run:

* nodes, and the counts of the ops that change;
* conversion time (medians of alternating conversions);
* ONNX Runtime CPU latency at ``--batch`` (the two sessions alternate run by
  run after a warm-up; medians);
* ``max |diff|`` of each model's output against ``jax.jit``'s.

GPT-2 small (the Flax NNX model of ``jax2onnx_flax.models``) is converted
with and without the pass too: the pass's cost on a large model, whose graph
jax2onnx already writes with fused ops.

"Switched off" replaces the pass's rewrite groups by none for the duration
of one conversion, in this process only.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).parent))

import third_party_models as tp  # noqa: E402

import jax2onnx  # noqa: E402
from jax2onnx.passes import fusion  # noqa: E402


@contextlib.contextmanager
def fusion_off():
    groups = fusion.GROUPS
    fusion.GROUPS = ()
    try:
        yield
    finally:
        fusion.GROUPS = groups


def convert(fn, specs, fused: bool):
    with contextlib.nullcontext() if fused else fusion_off():
        start = time.perf_counter()
        model = jax2onnx.to_onnx(fn, specs, opset=23)
        return model, time.perf_counter() - start


def conversion_times(fn, specs, repeats: int) -> tuple[float, float]:
    off, on = [], []
    for _ in range(repeats):
        off.append(convert(fn, specs, False)[1])
        on.append(convert(fn, specs, True)[1])
    return statistics.median(off), statistics.median(on)


def session(model):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def latencies(sessions, x, runs: int) -> list[float]:
    feeds = [{s.get_inputs()[0].name: x} for s in sessions]
    for s, feed in zip(sessions, feeds):
        for _ in range(3):
            s.run(None, feed)
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(runs):
        for i, (s, feed) in enumerate(zip(sessions, feeds)):
            start = time.perf_counter()
            s.run(None, feed)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def histogram(model) -> collections.Counter:
    return collections.Counter(node.op_type for node in model.graph.node)


def measure_model(name: str, fn, args) -> dict:
    config = tp.BERT if name == "bert" else tp.LLAMA
    specs = [jax.ShapeDtypeStruct(("B", config.seq, config.hidden), np.float32)]
    before, _ = convert(fn, specs, False)
    after, _ = convert(fn, specs, True)
    x = np.random.default_rng(0).standard_normal((args.batch, config.seq, config.hidden))
    x = x.astype(np.float32)
    want = np.asarray(jax.jit(fn)(x))
    sessions = [session(before), session(after)]
    diffs = [
        float(np.max(np.abs(s.run(None, {s.get_inputs()[0].name: x})[0] - want))) for s in sessions
    ]
    lat_before, lat_after = latencies(sessions, x, args.runs)
    time_before, time_after = conversion_times(fn, specs, args.repeats)
    ops_before, ops_after = histogram(before), histogram(after)
    changed = {
        op: f"{ops_before.get(op, 0)} -> {ops_after.get(op, 0)}"
        for op in sorted(set(ops_before) | set(ops_after))
        if ops_before.get(op, 0) != ops_after.get(op, 0)
    }
    return {
        "model": name,
        "nodes": [len(before.graph.node), len(after.graph.node)],
        "ops_changed": changed,
        "ort_ms": [round(1e3 * lat_before, 3), round(1e3 * lat_after, 3)],
        "ort_ratio": round(lat_after / lat_before, 3),
        "convert_s": [round(time_before, 3), round(time_after, 3)],
        "convert_ratio": round(time_after / time_before, 3),
        "max_abs_diff": [diffs[0], diffs[1]],
    }


def measure_gpt2(args) -> dict:
    from jax2onnx_flax import models

    model = models.gpt2(models.GPTConfig.gpt2_small())
    specs = [jax.ShapeDtypeStruct(("B", 128), np.int32)]
    convert(model, specs, True)  # warm-up: JAX's caches
    time_before, time_after = conversion_times(model, specs, args.repeats)
    after, _ = convert(model, specs, True)
    return {
        "model": "gpt2-small (conversion only)",
        "nodes_after": len(after.graph.node),
        "convert_s": [round(time_before, 3), round(time_after, 3)],
        "convert_ratio": round(time_after / time_before, 3),
    }


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="ORT runs per session")
    parser.add_argument("--repeats", type=int, default=5, help="conversions per setting")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--no-gpt2", action="store_true", help="skip GPT-2 small")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    results = [
        measure_model("bert", tp.bert(), args),
        measure_model("llama", tp.llama(), args),
    ]
    if not args.no_gpt2:
        results.append(measure_gpt2(args))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
