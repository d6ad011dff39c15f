"""What an ``Identity`` returning a Loop carry costs ONNX Runtime per step.

    python benchmarks/loop_copies.py [--steps 1000] [--rounds 200] [--size 2]

Two models of one ``Loop`` whose body shifts its carries (``a' = b + 1``,
``b' = a``, as a solver passes a value from one carry to the next): one returns
``b'`` through an ``Identity`` of the body input ``a`` (as lowered), the other
returns the body input itself (what ``ForwardLoopCarriesPass`` makes of it).
Both run alternately in one process; the figures are medians per loop step and
their ratio. The outputs are compared first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def shifting_loop(steps: int, size: int, *, copy: bool) -> onnx.ModelProto:
    vector = [size]
    nodes = [
        helper.make_node("Add", ["b_in", "one"], ["a_out"]),
        helper.make_node("Identity", ["go_in"], ["go_out"]),
    ]
    if copy:
        nodes.append(helper.make_node("Identity", ["a_in"], ["b_out"]))
    inputs = [
        helper.make_tensor_value_info("step", TensorProto.INT64, []),
        helper.make_tensor_value_info("go_in", TensorProto.BOOL, []),
        helper.make_tensor_value_info("a_in", TensorProto.FLOAT, vector),
        helper.make_tensor_value_info("b_in", TensorProto.FLOAT, vector),
    ]
    outputs = [
        helper.make_tensor_value_info("go_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("a_out", TensorProto.FLOAT, vector),
        helper.make_tensor_value_info("b_out" if copy else "a_in", TensorProto.FLOAT, vector),
    ]
    body = helper.make_graph(nodes, "body", inputs, outputs)
    loop = helper.make_node("Loop", ["steps", "", "x", "x"], ["a", "b"], body=body)
    graph = helper.make_graph(
        [loop],
        "shift",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, vector)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, vector) for n in ("a", "b")],
        [
            helper.make_tensor("steps", TensorProto.INT64, [], [steps]),
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--size", type=int, default=2)
    args = parser.parse_args()
    x = np.linspace(-1.0, 1.0, args.size, dtype=np.float32)
    sessions = {}
    for copy in (True, False):
        model = shifting_loop(args.steps, args.size, copy=copy).SerializeToString()
        sessions[copy] = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    results = [sessions[c].run(None, {"x": x}) for c in (True, False)]
    for got, want in zip(results[1], results[0], strict=True):
        np.testing.assert_array_equal(got, want)
    times: dict[bool, list[float]] = {True: [], False: []}
    for k in range(args.rounds):
        for copy in (True, False) if k % 2 else (False, True):
            start = time.perf_counter()
            sessions[copy].run(None, {"x": x})
            times[copy].append(time.perf_counter() - start)
    per_step = {c: statistics.median(t) / args.steps * 1e6 for c, t in times.items()}
    print(f"Identity returning the carry: {per_step[True]:.2f} us per step")
    print(f"body input returned directly: {per_step[False]:.2f} us per step")
    print(f"ratio direct/Identity: {per_step[False] / per_step[True]:.2f}x")


if __name__ == "__main__":
    main()
