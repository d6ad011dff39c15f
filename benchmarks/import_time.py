"""What jax2onnx adds to ``import jax`` and to the first trace, in fresh processes.

Run: python benchmarks/import_time.py [--runs 7]

Two probes, each run ``--runs`` times in new interpreters, alternating:

* ``import``: imports jax, then times importing jax2onnx and, separately, the
  first ``jax2onnx.plugins()`` (which loads every installed plugin, as the
  first ``to_onnx`` does).
* ``first conversion``: imports jax, builds the quickstart's Flax NNX MLP
  (``examples/quickstart.py``; Flax's import and the model are the user's
  cost, not timed), then times ``import jax2onnx`` plus the first
  ``to_onnx(model, [("B", 30)])``, and ``jax.make_jaxpr`` of the same
  inference-mode function on the same symbolic input in the same process.
  What jax2onnx adds is the conversion minus ``make_jaxpr``. Whichever of the
  two runs first pays JAX's own first-trace costs, so the probe alternates
  the order: ``convert_first`` (the conversion really is the process's first
  trace; ``make_jaxpr`` then reuses JAX's caches, so the difference is an
  upper bound) and ``jaxpr_first`` (a lower bound). Of the conversion, the
  probe also reports the import of ``onnx`` and ``onnx_ir``, loading the
  plugins, and the time Python's garbage collector ran (a full collection
  of the process's objects, jax's and flax's included, often falls in the
  first conversion).

Every figure is also given as a ratio to ``import jax`` measured in the same
process, so the report compares numbers of one command. The probes run without
``PYTHONDONTWRITEBYTECODE``, after one discarded run of each, so modules load
from their bytecode caches as in an installed package.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HEAVY = ("flax", "equinox", "onnxruntime", "onnx_ir", "sympy")

IMPORT_PROBE = f"""
import sys, time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
import jax2onnx
t2 = time.perf_counter()
jax2onnx.plugins()
t3 = time.perf_counter()
heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
print(t1 - t0, t2 - t1, t3 - t2, ",".join(heavy) or "-")
"""

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
CONVERT_PROBE = """
import sys, time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, sys.argv[2])
from quickstart import MLP  # examples/quickstart.py (it imports jax2onnx, 0.02 s: not timed)

model = MLP(30, 20, 10, rngs=nnx.Rngs(0))
inference = nnx.clone(model)
inference.eval()  # what to_onnx exports: BatchNorm's running statistics, no Dropout


import gc

parts = {"ir": 0.0, "plugins": 0.0, "gc": 0.0}
gc_started = [0.0]


def gc_timer(phase, info):
    if phase == "start":
        gc_started[0] = time.perf_counter()
    elif timing[0]:
        parts["gc"] += time.perf_counter() - gc_started[0]


timing = [False]
gc.callbacks.append(gc_timer)


def convert():
    timing[0] = True
    start = time.perf_counter()
    import jax2onnx
    import jax2onnx.values.ir  # onnx and onnx_ir, which every conversion needs

    parts["ir"] = time.perf_counter() - start
    jax2onnx.plugins()
    parts["plugins"] = time.perf_counter() - start - parts["ir"]
    jax2onnx.to_onnx(model, [("B", 30)])
    timing[0] = False
    return time.perf_counter() - start


def trace():
    start = time.perf_counter()
    (batch,) = jax.export.symbolic_shape("B")
    jax.make_jaxpr(inference)(jax.ShapeDtypeStruct((batch, 30), jnp.float32))
    return time.perf_counter() - start


if sys.argv[1] == "convert_first":
    converted, traced = convert(), trace()
else:
    traced, converted = trace(), convert()
print(t1 - t0, converted, traced, parts["ir"], parts["plugins"], parts["gc"])
"""


def _run(probe: str, *args: str) -> list[str]:
    command = [sys.executable, "-c", probe, *args]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return done.stdout.split()


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    imports: dict[str, list[float]] = {"jax": [], "ours": [], "loads": []}
    orders = ("convert_first", "jaxpr_first")
    convert: dict[str, dict[str, list[float]]] = {
        o: {"jax": [], "convert": [], "jaxpr": [], "ir": [], "plugins": [], "gc": []}
        for o in orders
    }
    heavy = "-"
    # one discarded run of each probe writes the bytecode caches
    _run(IMPORT_PROBE)
    _run(CONVERT_PROBE, orders[0], EXAMPLES)
    for _ in range(args.runs):
        jax_s, ours, load, heavy = _run(IMPORT_PROBE)
        imports["jax"].append(float(jax_s))
        imports["ours"].append(float(ours))
        imports["loads"].append(float(load))
        for order in orders:
            figures = _run(CONVERT_PROBE, order, EXAMPLES)
            for key, value in zip(("jax", "convert", "jaxpr", "ir", "plugins", "gc"), figures):
                convert[order][key].append(float(value))
    jax_median = statistics.median(imports["jax"])
    ours, loads = statistics.median(imports["ours"]), statistics.median(imports["loads"])
    result = {
        "import_jax_s": round(jax_median, 4),
        "import_jax2onnx_after_jax_s": round(ours, 4),
        "ratio_to_import_jax": round(ours / jax_median, 4),
        "plugin_load_s": round(loads, 4),
        "import_plus_plugins_ratio_to_import_jax": round((ours + loads) / jax_median, 4),
        "heavy_modules_imported": [] if heavy == "-" else heavy.split(","),
        "first_conversion_target_s": 0.15,
    }
    for order in orders:
        runs = convert[order]
        # per run: the conversion beyond make_jaxpr, as a fraction of that run's import jax
        beyond = [c - t for c, t in zip(runs["convert"], runs["jaxpr"])]
        ratios = [b / j for b, j in zip(beyond, runs["jax"])]
        result[f"first_conversion_{order}"] = {
            "import_jax_s": _median(runs["jax"]),
            "import_jax2onnx_and_to_onnx_s": _median(runs["convert"]),
            "make_jaxpr_s": _median(runs["jaxpr"]),
            "beyond_make_jaxpr_s": _median(beyond),
            "beyond_make_jaxpr_ratio_to_import_jax": _median(ratios),
            "of_which_onnx_and_onnx_ir_import_s": _median(runs["ir"]),
            "of_which_plugins_s": _median(runs["plugins"]),
            "of_which_garbage_collection_s": _median(runs["gc"]),
        }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
