"""Equinox recurrent cells: ``eqx.nn.GRUCell`` and ``eqx.nn.LSTMCell`` as one step each.

A cell's call ``(input, hidden) -> hidden`` (GRU) or ``(input, (h, c)) -> (h, c)``
(LSTM) is the macro primitive ``equinox.eqx_gru_cell`` / ``equinox.eqx_lstm_cell``
over the inputs and the cell's arrays (widened to the computation dtype at
conversion time, as Equinox's promotion does). One step lowers to two Gemms
(``transB=1`` on Equinox's ``(gates*hidden, in)`` weights, no transposed copy)
and the gate arithmetic, in Equinox's order:

* GRU: ``Gemm(x, W_ih, bias)`` and ``Gemm(h, W_hh, [0, 0, bias_n])`` (the C made
  at conversion time), each Split into (reset, update, new): the zeros add
  nothing to the reset and update blocks and ``bias_n`` is Equinox's
  ``hgates[2] + bias_n``; then
  ``r = Sigmoid(ir + hr)``, ``z = Sigmoid(iz + hz)``, ``n = Tanh(in + r * hn)``,
  ``h' = n + z * (h - n)``.
* LSTM: ``Gemm(h, W_hh, C=Gemm(x, W_ih))`` (Equinox's ``W_ih @ x + W_hh @ h``),
  ``+ bias``, one Split into (i, f, g, o), ``c' = f * c + i * g``,
  ``h' = o * Tanh(c')``.

Under ``jax.vmap`` the batching rule binds the same primitive with the batch
in front, so a batch is one step (no Loop, no per-example ops); inside
``jax.lax.scan`` the step is lowered into the scan's Loop body like any other
equation, so a sequence is one Loop around one batched step. The JVP is JAX's
derivative of ``impl`` (Equinox's arithmetic), so ``jax.grad`` through a scan
converts. Calls Equinox would reject (wrong ranks or sizes) run Equinox's own
code, which raises its own error.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, at_conversion, call_arguments
from jax2onnx_equinox._util import FLOATS, eqx_factory, factory_cases

family = Family("equinox")
register = family.register


def _product(x, w):
    """``x @ w.T`` over the last axis of ``x`` (Equinox's ``w @ x`` per example)."""
    return jax.lax.dot_general(x, w, (((x.ndim - 1,), (1,)), ((), ())))


# -- reference semantics -----------------------------------------------------------------


def _gru_impl(x, h, w_ih, w_hh, *biases, has_bias):
    """Equinox's GRU step; ``biases`` are ``bias`` and ``[0, 0, bias_n]`` (Equinox adds
    ``bias_n`` to the hidden product's new-gate block, the zeros add nothing)."""
    bias, bias_h = biases if has_bias else (0, 0)
    ir, iz, i_n = jnp.split(_product(x, w_ih) + bias, 3, axis=-1)
    hr, hz, hn = jnp.split(_product(h, w_hh) + bias_h, 3, axis=-1)
    reset = jax.nn.sigmoid(ir + hr)
    update = jax.nn.sigmoid(iz + hz)
    new = jnp.tanh(i_n + reset * hn)
    return new + update * (h - new)


def _lstm_impl(x, h, c, w_ih, w_hh, *bias, has_bias):
    lin = _product(x, w_ih) + _product(h, w_hh)
    if has_bias:
        lin = lin + bias[0]
    i, f, g, o = jnp.split(lin, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return [jax.nn.sigmoid(o) * jnp.tanh(c), c]


def _batching(name, impl, n_inputs, multiple):
    """Only inputs/state batched: the same primitive with the batch in front."""

    def rule(args, dims, **params):
        from jax.interpreters import batching

        if any(d is not None for d in dims[n_inputs:]):  # batched weights: JAX's vmap
            out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims))(*args)
        else:
            size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
            front = [
                batching.bdim_at_front(a, d, size)
                for a, d in zip(args[:n_inputs], dims[:n_inputs], strict=True)
            ]
            out = globals()[name].bind(*front, *args[n_inputs:], **params)
        return out, ([0] * len(out) if multiple else 0)

    return rule


gru_p = family.primitive(
    "eqx_gru_cell",
    impl=_gru_impl,
    batching=_batching("gru_p", _gru_impl, 2, False),
    jvp="fallback",
)
lstm_p = family.primitive(
    "eqx_lstm_cell",
    impl=_lstm_impl,
    batching=_batching("lstm_p", _lstm_impl, 3, True),
    jvp="fallback",
    multiple_results=True,
)


# -- stand-ins -----------------------------------------------------------------------------


def _arrays(cell, gru):
    """The cell's arrays in operand order (GRU: ``bias_n`` as ``[0, 0, bias_n]``)."""
    arrays = [cell.weight_ih, cell.weight_hh]
    if not cell.use_bias:
        return arrays
    if gru:
        zeros = jnp.zeros(2 * cell.hidden_size, jnp.result_type(cell.bias_n))
        return [*arrays, cell.bias, jnp.concatenate([zeros, cell.bias_n])]
    return [*arrays, cell.bias]


def _cell_binder(prim, n_state):
    """A stand-in binding ``prim`` on ``(input, *state, *arrays)``; else Equinox's call."""

    def binder(original):
        arguments = call_arguments(original)

        @functools.wraps(original)
        def call(self, *args, **kwargs):
            a = arguments(self, *args, **kwargs)
            if a is None:
                return original(self, *args, **kwargs)
            x, hidden = a["input"], a["hidden"]
            if n_state > 1 and (not isinstance(hidden, (tuple, list)) or len(hidden) != n_state):
                return original(self, *args, **kwargs)
            state = tuple(hidden) if n_state > 1 else (hidden,)
            arrays = at_conversion(_arrays, self, prim is gru_p)
            dtype = np.dtype(jnp.result_type(x, *state, *arrays))
            if (
                jnp.ndim(x) != 1
                or jnp.shape(x)[0] != self.input_size
                or any(jnp.shape(s) != (self.hidden_size,) for s in state)
                or dtype not in FLOATS
            ):
                return original(self, *args, **kwargs)
            operands = [jnp.asarray(v, dtype) for v in (x, *state)]
            operands += at_conversion(lambda: [jnp.asarray(w, dtype) for w in arrays])
            out = prim.bind(*operands, has_bias=bool(self.use_bias))
            return tuple(out) if n_state > 1 else out

        return call

    return binder


family.intercept("equinox.nn.GRUCell.__call__", gru_p, binder=_cell_binder(gru_p, 1))
family.intercept("equinox.nn.LSTMCell.__call__", lstm_p, binder=_cell_binder(lstm_p, 2))


# -- lowerings -------------------------------------------------------------------------------


def _rows(ctx, values):
    """The step's ``(*batch, n)`` values as ``(B, n)`` (no node when already 2-D)."""
    aval = ctx.avals_in[0]
    if aval.ndim == 2:
        return list(values)
    return [
        ctx.op.Reshape(v, ctx.shape([-1, a.shape[-1]]))
        for v, a in zip(values, ctx.avals_in, strict=False)
    ]


def _unrows(ctx, values):
    if ctx.avals_in[0].ndim == 2:
        return values
    return [
        ctx.op.Reshape(v, ctx.shape(a.shape)) for v, a in zip(values, ctx.avals_out, strict=True)
    ]


@family.lowering(gru_p)
def gru_cell(ctx, x, h, w_ih, w_hh, *biases, has_bias):
    """Two Gemms (``[0, 0, bias_n]`` as the hidden Gemm's C), Equinox's gates."""
    x, h = _rows(ctx, (x, h))
    bias, bias_h = biases if has_bias else (None, None)
    igates = ctx.op.Gemm(x, w_ih, bias, transB=1)
    hgates = ctx.op.Gemm(h, w_hh, bias_h, transB=1)
    ir, iz, i_n = ctx.op.Split(igates, axis=-1, num_outputs=3, _outputs=3)
    hr, hz, hn = ctx.op.Split(hgates, axis=-1, num_outputs=3, _outputs=3)
    reset = ctx.op.Sigmoid(ctx.op.Add(ir, hr))
    update = ctx.op.Sigmoid(ctx.op.Add(iz, hz))
    new = ctx.op.Tanh(ctx.op.Add(i_n, ctx.op.Mul(reset, hn)))
    out = ctx.op.Add(new, ctx.op.Mul(update, ctx.op.Sub(h, new)))
    return _unrows(ctx, [out])[0]


@family.lowering(lstm_p)
def lstm_cell(ctx, x, h, c, w_ih, w_hh, *bias, has_bias):
    """``Gemm(h, W_hh, C=Gemm(x, W_ih))`` (+ bias), one Split, Equinox's gates."""
    x, h, c = _rows(ctx, (x, h, c))
    lin = ctx.op.Gemm(h, w_hh, ctx.op.Gemm(x, w_ih, transB=1), transB=1)
    if has_bias:
        lin = ctx.op.Add(lin, bias[0])
    i, f, g, o = ctx.op.Split(lin, axis=-1, num_outputs=4, _outputs=4)
    new_c = ctx.op.Add(
        ctx.op.Mul(ctx.op.Sigmoid(f), c), ctx.op.Mul(ctx.op.Sigmoid(i), ctx.op.Tanh(g))
    )
    new_h = ctx.op.Mul(ctx.op.Sigmoid(o), ctx.op.Tanh(new_c))
    return _unrows(ctx, [new_h, new_c])


# -- cases ----------------------------------------------------------------------------------

T, F, H = 3, 4, 6  # time steps, input features, hidden size


def _cell(kind, **kw):
    return eqx_factory(lambda eqx, key: getattr(eqx.nn, kind)(F, H, **kw, key=key))


def _lstm_step(cell):
    return lambda x, h, c: cell(x, (h, c))


def _sequence(kind, **kw):
    """A model on one sequence ``(T, F)``: Equinox's idiom, ``lax.scan`` over the cell."""
    make = _cell(kind, **kw)

    def factory():
        cell = make()

        def model(xs):
            zeros = jnp.zeros(H, xs.dtype)
            init = (zeros, zeros) if kind == "LSTMCell" else zeros
            step = lambda state, x: (cell(x, state), None)  # noqa: E731
            return jax.lax.scan(step, init, xs)[0]

        return model

    return factory


def _time_major(kind):
    """``lax.scan`` over time of the vmapped cell: ``(T, B, F)`` -> every step's hidden state."""
    make = _cell(kind)

    def factory():
        cell = jax.vmap(make() if kind == "GRUCell" else _lstm_step(make()))

        def step(state, x):
            new = cell(x, state) if kind == "GRUCell" else cell(x, *state)
            return new, new if kind == "GRUCell" else new[0]

        def fn(xs):
            zeros = jnp.zeros((xs.shape[1], H), xs.dtype)
            return jax.lax.scan(step, zeros if kind == "GRUCell" else (zeros, zeros), xs)

        return fn

    return factory


def _wrapped(make, wrap):
    return lambda: wrap(make())


def _grad_of_sequence(model):
    return jax.grad(lambda xs: sum((leaf**2).sum() for leaf in jax.tree.leaves(model(xs))))


_GRU = ["Gemm -> Split -> Add -> Sigmoid -> Mul -> Add -> Tanh -> Sub -> Mul -> Add"]
_LSTM = ["Gemm -> Gemm -> Add -> Split -> Sigmoid -> Mul -> Add -> Tanh -> Mul"]
_ONE_STEP = {"Gemm": 2, "MatMul": 0, "Loop": 0, "Concat": 0, "Transpose": 0}

family.add_cases(
    gru_p,
    lambda: factory_cases(
        [
            (
                "eqx_gru_cell",
                _wrapped(_cell("GRUCell"), jax.vmap),
                [("B", F), ("B", H)],
                dict(expect=[f"{_GRU[0]}:Bx{H}"], counts=_ONE_STEP),
            ),
            (
                "eqx_gru_cell_no_bias",
                _cell("GRUCell", use_bias=False),
                [(F,), (H,)],
                dict(expect=_GRU, counts=_ONE_STEP),
            ),
            (
                "eqx_gru_scan_time_major",
                _time_major("GRUCell"),
                [(T, "B", F)],
                dict(expect=_GRU, counts={"Loop": 1, "Gemm": 2, "MatMul": 0}),
            ),
            (
                "eqx_gru_sequence_vmapped",
                _wrapped(_sequence("GRUCell"), jax.vmap),
                [("B", T, F)],
                dict(expect=[*_GRU, f"Loop:Bx{H}"], counts={"Loop": 1, "Gemm": 2}),
            ),
        ]
    ),
)

family.add_cases(
    lstm_p,
    lambda: factory_cases(
        [
            (
                "eqx_lstm_cell",
                _wrapped(_cell("LSTMCell"), lambda c: jax.vmap(_lstm_step(c))),
                [("B", F), ("B", H), ("B", H)],
                dict(expect=_LSTM, counts=_ONE_STEP),
            ),
            (
                "eqx_lstm_scan_time_major",
                _time_major("LSTMCell"),
                [(T, "B", F)],
                dict(expect=_LSTM, counts={"Loop": 1, "Gemm": 2, "MatMul": 0}),
            ),
            (
                "eqx_lstm_sequence_vmapped",
                _wrapped(_sequence("LSTMCell"), jax.vmap),
                [("B", T, F)],
                dict(expect=_LSTM, counts={"Loop": 1, "Gemm": 2}),
            ),
            (
                "eqx_lstm_scan_grad",
                _wrapped(_sequence("LSTMCell"), lambda m: _grad_of_sequence(jax.vmap(m))),
                [(2, T, F)],
                {},
            ),
        ]
    ),
)
