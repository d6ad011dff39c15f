"""``ctx.subgraph``: a rule builds an If whose branches are lowered jaxprs."""

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
from jax.interpreters import mlir

from jax2onnx import to_onnx
from jax2onnx.plugin import Rules


def _branchy(pred, x):
    return jnp.where(pred, jnp.tanh(x), -x * 2.0)


branchy_p = jax.extend.core.Primitive("test_branchy")
branchy_p.def_impl(_branchy)
branchy_p.def_abstract_eval(lambda pred, x: jax.core.ShapedArray(x.shape, x.dtype))
mlir.register_lowering(branchy_p, mlir.lower_fun(_branchy, multiple_results=False))

rules = Rules("subgraph_test")


@rules.lowering(branchy_p)
def branchy(ctx, pred, x):
    """If(pred): then tanh(x), else -2x; each branch is a jaxpr lowered into a subgraph."""
    spec = jax.ShapeDtypeStruct(ctx.avals_in[1].shape, ctx.avals_in[1].dtype)
    graphs = []
    for name, fn in (("then", jnp.tanh), ("else", lambda v: -v * 2.0)):
        body = ctx.subgraph(name)
        (out,) = body.inline(ctx.trace(fn, spec), [x])  # x comes from the outer scope
        graphs.append(body.finish([out], ctx.avals_out))
    return ctx.op.If(pred, then_branch=graphs[0], else_branch=graphs[1])


def test_if_with_subgraph_branches_matches_jax():
    model = to_onnx(
        lambda p, x: branchy_p.bind(p, x),
        [jax.ShapeDtypeStruct((), np.bool_), ("B", 3)],
        extra_rules=[rules],
    )
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node] == ["If"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    for pred in (True, False):
        (got,) = session.run(None, {"in_0": np.array(pred), "in_1": x})
        np.testing.assert_allclose(got, _branchy(pred, x), rtol=1e-6, atol=1e-6)
