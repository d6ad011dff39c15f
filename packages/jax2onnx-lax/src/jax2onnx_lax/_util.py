"""Layout helpers shared by the lax family modules."""

from __future__ import annotations

from typing import Any

from jax2onnx.plugin import is_symbolic


def reshape(ctx, x, dims, keep=0) -> Any:
    """Reshape to ``dims``; the first ``keep`` axes are unchanged (copied with 0 when symbolic)."""
    dims = list(dims)
    if not any(is_symbolic(d) for d in dims):
        return ctx.reshape(x, dims)
    tail = dims[keep:]
    if not any(is_symbolic(d) for d in tail) and 0 not in tail:
        return ctx.op.Reshape(x, ctx.i64([0] * keep + [int(d) for d in tail]))
    if sum(is_symbolic(d) for d in tail) == 1 and 0 not in tail:
        spec = [0] * keep + [-1 if is_symbolic(d) else int(d) for d in tail]
        return ctx.op.Reshape(x, ctx.i64(spec))
    return ctx.reshape(x, dims)  # sizes computed at run time: allowzero, any may be 0
