"""What ``jax2onnx.verify`` costs, against the work it stands for.

    python benchmarks/verify_cost.py                 # GPT-2 small, batch 1
    python benchmarks/verify_cost.py --models mlp,cnn,gpt2 --batch 2

For each model of ``benchmarks/run.py`` (random weights) one process measures,
in this order:

* the **baseline**: one plain conversion (``to_onnx`` to a ``ModelProto``),
  one JAX run (``jax.jit`` of the function, compiled and run once) and one
  ONNX Runtime run (session created from the model, run once);
* ``verify`` on the same inputs: its conversion, the ONNX Runtime run with
  every value exposed, and JAX's equation-by-equation evaluation.

and reports ``verify / baseline`` (the issue's goal: at most 5x on GPT-2
small), with the number of equations compared and the report's verdict.
Each measurement runs once: a warm-up would hide the first compilations,
which ``verify`` pays for as a user would.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from run import build  # noqa: E402 - the same models as benchmarks/run.py


def measure(name: str, batch: int) -> dict[str, object]:
    import jax
    import onnxruntime as ort

    import jax2onnx

    module, specs, make_inputs = build(name, False)
    inputs = make_inputs(batch)

    start = time.perf_counter()
    proto = jax2onnx.to_onnx(module, specs)
    convert_s = time.perf_counter() - start

    fn = jax2onnx.traced_callable(module)
    start = time.perf_counter()
    jax.block_until_ready(jax.jit(fn)(*inputs))
    jax_s = time.perf_counter() - start

    start = time.perf_counter()
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
    session.run(None, feed)
    ort_s = time.perf_counter() - start

    start = time.perf_counter()
    report = jax2onnx.verify(module, inputs)
    verify_s = time.perf_counter() - start

    baseline = convert_s + jax_s + ort_s
    return {
        "model": name,
        "batch": batch,
        "convert s": round(convert_s, 3),
        "jax s": round(jax_s, 3),
        "ort s": round(ort_s, 3),
        "baseline s": round(baseline, 3),
        "verify s": round(verify_s, 3),
        "verify/baseline": round(verify_s / baseline, 2),
        "compared": f"{len(report.entries)}/{report.equations}",
        "ok": report.ok,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt2", help="comma-separated run.py models")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = [measure(name, args.batch) for name in args.models.split(",")]
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
