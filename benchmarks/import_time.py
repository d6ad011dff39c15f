"""How much time ``import jax2onnx`` adds to ``import jax``, in fresh processes.

Run: python benchmarks/import_time.py [--runs 7]

Each run starts a new interpreter that imports jax, then times importing
jax2onnx and, separately, the first ``jax2onnx.plugins()`` (which loads every
installed plugin, as the first ``to_onnx`` does). The baseline is a run that
times ``import jax`` itself the same way, so the report is a ratio measured
in the same command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = """
import time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
import jax2onnx
t2 = time.perf_counter()
jax2onnx.plugins()
t3 = time.perf_counter()
heavy = sorted(m for m in ("flax", "equinox", "onnxruntime", "onnx_ir", "sympy")
               if m in __import__("sys").modules)
print(t1 - t0, t2 - t1, t3 - t2, ",".join(heavy))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    jax_times, ours, loads = [], [], []
    heavy = ""
    for _ in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
        ).stdout.split()
        jax_times.append(float(out[0]))
        ours.append(float(out[1]))
        loads.append(float(out[2]))
        heavy = out[3] if len(out) > 3 else ""
    jax_median, ours_median = statistics.median(jax_times), statistics.median(ours)
    result = {
        "import_jax_s": round(jax_median, 4),
        "import_jax2onnx_after_jax_s": round(ours_median, 4),
        "ratio_to_import_jax": round(ours_median / jax_median, 4),
        "plugin_load_s": round(statistics.median(loads), 4),
        "import_plus_plugins_ratio_to_import_jax": round(
            (ours_median + statistics.median(loads)) / jax_median, 4
        ),
        "target_s": 0.15,
        "heavy_modules_imported": heavy.split(",") if heavy else [],
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
