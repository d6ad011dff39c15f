"""Loops bounded by counters get their trip count; carries nobody needs go (passes.counters).

Every case runs the exported model at several starts (none, some and all of
the steps) and compares with ``jax.jit``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx


def _loops(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "Loop"]


def _body_ops(loop: onnx.NodeProto) -> list[str]:
    return [n.op_type for n in loop.attribute[0].g.node]


def _check(fn, args_list, model):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for args in args_list:
        feeds = {i.name: a for i, a in zip(session.get_inputs(), args, strict=True)}
        got = session.run(None, feeds)
        want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6, atol=1e-6)


def test_a_loop_from_a_start_known_at_run_time_to_a_bound_counts_its_steps():
    def fn(start, x):  # a fori_loop whose start is data: a while on a counter
        return jax.lax.fori_loop(start[0], 7, lambda i, c: c * 0.5 + jnp.sin(c + i), x)

    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    model = to_onnx(fn, [np.array([0], np.int32), x])
    (loop,) = _loops(model)
    assert loop.input[0], "the Loop has a trip count"
    assert not {"Less", "And"} & set(_body_ops(loop)), _body_ops(loop)
    outside = [n.op_type for n in model.graph.node]
    assert outside.count("Cast") + outside.count("Sub") <= 2, outside  # the count: start, 7
    starts = [0, 3, 6, 7, 9, -2]  # every step, some, one, none, none, more than the bound
    _check(fn, [(np.array([s], np.int32), x) for s in starts], model)


def test_a_data_test_stays_beside_the_counted_bound():
    def fn(x):  # at most 20 halvings, fewer once the norm is small
        def cond(carry):
            k, c = carry
            return (k < 20) & (jnp.sum(c * c) > 1e-3)

        return jax.lax.while_loop(cond, lambda kc: (kc[0] + 1, kc[1] * 0.5), (0, x))

    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    model = to_onnx(fn, [x])
    (loop,) = _loops(model)
    assert loop.input[0] and "Greater" in _body_ops(loop) and "Less" not in _body_ops(loop)
    _check(fn, [(x,), (x * 1e-3,), (x * 1e6,)], model)


def test_a_counter_nobody_reads_after_the_loop_goes_with_its_step():
    def fn(x, n):  # the count bounds the loop; only the values leave it
        def body(carry):
            i, j, c = carry
            return i + 1, j + 1, c + x

        _, _, out = jax.lax.while_loop(lambda k: k[1] <= n[0], body, (0, n[0] - 3, x))
        return out

    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    model = to_onnx(fn, [x, np.array([4], np.int32)])
    (loop,) = _loops(model)
    assert len(loop.input) == 3 and _body_ops(loop) == ["Add"], _body_ops(loop)
    _check(fn, [(x, np.array([n], np.int32)) for n in (4, 0, -5)], model)


def test_a_counter_stepped_by_two_or_bounded_inside_the_body_keeps_its_test():
    def by_two(x):
        return jax.lax.while_loop(
            lambda k: k[0] < 9, lambda k: (k[0] + 2, k[1] * 0.5), (x[0].astype(jnp.int32), x)
        )

    x = np.array([1.0, 2.0, 3.0], np.float32)
    model = to_onnx(by_two, [x])
    (loop,) = _loops(model)
    assert "Less" in _body_ops(loop)
    _check(by_two, [(x,), (x * 0 - 3,)], model)


def _skipping_scan(skip_counts: bool):
    def fn(x, go):
        def body(carry, _):
            def step(c):
                v, _, k = c
                v = v * 0.5 + 0.01 * jnp.sin(v)
                return v, jnp.sum(jnp.abs(v)) > 1e-3, k + 1

            def skip(c):  # returns the carries as they came (or counts the skipped steps)
                return (c[0], c[1], c[2] + 1) if skip_counts else c

            return jax.lax.cond(carry[1], step, skip, carry), None

        (v, _, k), _ = jax.lax.scan(body, (x, go[0], 0), None, length=50)
        return v, k

    return fn


def test_a_scan_that_skips_once_done_stops_when_done():
    fn = _skipping_scan(skip_counts=False)
    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    model = to_onnx(fn, [x, np.array([True])])
    (loop,) = _loops(model)
    assert "If" not in _body_ops(loop), _body_ops(loop)
    # stops after a few steps, after all 50 (a large start), or never starts
    cases = [(x, [True]), (x * 1e30, [True]), (x * 1e-6, [True]), (x, [False])]
    _check(fn, [(v, np.array(g)) for v, g in cases], model)


def test_a_skipping_branch_that_changes_a_carry_keeps_the_if():
    fn = _skipping_scan(skip_counts=True)
    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    model = to_onnx(fn, [x, np.array([True])])
    (loop,) = _loops(model)
    assert "If" in _body_ops(loop), _body_ops(loop)
    _check(fn, [(x, np.array([True])), (x, np.array([False]))], model)
