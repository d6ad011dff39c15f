"""The scientific JAX stack's example solves (``jax2onnx_equinox.solvers``) as ONNX,
and the pseudo-spectral Burgers solver of ``examples/spectral_burgers.py``.

    python benchmarks/scientific.py              # every example, float32
    python benchmarks/scientific.py --runs 50 --only diffrax_dopri5_pid

For each example, in one process: the nodes of the exported model (every graph,
Loop bodies included) and the node executions of one ONNX Runtime call (from
ORT's profiler: every node run, in Loop and If bodies once per step), each
with the loop and indexing passes and without them (``HoistLoopInvariantsPass``,
``MergeBodyDuplicatesPass``, ``FoldIndexingPass``, ``FoldIndexRangesPass``,
``ComposeGathersPass``, ``LiftScalarsPass``, ``ForwardLoopCarriesPass``,
``ExitLoopsEarlyPass``, ``CountLoopTripsPass``, ``UnrollCountedLoopsPass``,
``CollapseLinearMapsPass``, ``HoistLinearMapsPass`` and ``SinkIntoUpdatesPass``
replaced by nothing for one conversion, in this process only, with
``jax2onnx_testkit.passes_off``), the conversion time (median of 3), ONNX
Runtime's latency against ``jax.jit`` of the same function on the same input
(calls alternating after a warm-up; medians; a default session), and the
largest absolute difference of the outputs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np
import onnxruntime as ort

import jax2onnx
from jax2onnx import passes
from jax2onnx_testkit import op_counts, passes_off

sys.path.insert(0, str(Path(__file__).parent))
from run import _latencies  # noqa: E402 - the interleaved timing of benchmarks/run.py

_COMPARED = (
    passes.HoistLoopInvariantsPass,
    passes.MergeBodyDuplicatesPass,
    passes.FoldIndexingPass,
    passes.FoldIndexRangesPass,
    passes.ComposeGathersPass,
    passes.LiftScalarsPass,
    passes.ForwardLoopCarriesPass,
    passes.ExitLoopsEarlyPass,
    passes.CountLoopTripsPass,
    passes.UnrollCountedLoopsPass,
    passes.CollapseLinearMapsPass,
    passes.HoistLinearMapsPass,
    passes.SinkIntoUpdatesPass,
)


def nodes(model) -> int:
    """Every node, Loop/If bodies included."""
    return sum(op_counts(model).values())


def node_runs(proto, feed) -> tuple[int, int]:
    """(node executions, of them inside Loop/If bodies) of one call, from ORT's profiler."""
    import json
    import tempfile

    options = ort.SessionOptions()
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as folder:
        options.profile_file_prefix = str(Path(folder) / "profile")
        session = ort.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    top = {n.name for n in proto.graph.node}
    runs = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    nested = [e for e in runs if e["name"][: -len("_kernel_time")] not in top]
    return len(runs), len(nested)


def measure(name: str, fn, shape, runs: int) -> dict[str, str]:
    x = np.random.default_rng(0).uniform(0.9, 1.1, shape).astype(np.float32)
    with passes_off(*_COMPARED):
        plain = jax2onnx.to_onnx(fn, [x])
    times = []
    for _ in range(3):
        start = time.perf_counter()
        proto = jax2onnx.to_onnx(fn, [x])
        times.append(time.perf_counter() - start)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [session.get_inputs()[0].name]
    feed = {names[0]: x}
    jitted = jax.jit(fn)
    want = np.asarray(jitted(x))
    (got,) = session.run(None, feed)
    ort_s, jax_s = _latencies(session, names, jitted, [x], runs)
    executed, in_bodies = node_runs(proto, feed)
    before, _ = node_runs(plain, feed)

    def ratio(a: float, b: float) -> str:
        return f"{a * 1e3:.3f}/{b * 1e3:.3f} ms ({a / b:.2f}x)"

    return {
        "example": name,
        "nodes (unchanged export)": f"{nodes(proto)} ({nodes(plain)})",
        "node runs per call (in bodies)": f"{executed} ({in_bodies})",
        "node runs, unchanged export": str(before),
        "conversion s": f"{statistics.median(times):.2f}",
        "ORT/JAX": ratio(ort_s, jax_s),
        "max abs diff": f"{float(np.max(np.abs(got - want))):.1e}",
    }


def _burgers():
    """``burgers`` of examples/spectral_burgers.py: 64 points, 20 RK2 steps of FFT derivatives."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
    from spectral_burgers import burgers

    return burgers


def main(argv: list[str] | None = None) -> int:
    from jax2onnx_equinox import solvers

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--only", help="comma-separated example names")
    args = parser.parse_args(argv)
    examples = dict(solvers.SOLVES)
    examples["spectral_burgers"] = (_burgers(), (64,))
    wanted = args.only.split(",") if args.only else list(examples)
    rows = [measure(n, *examples[n], args.runs) for n in wanted]
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(row.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
