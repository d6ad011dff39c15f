"""Flax Linen recurrent cells, and ``nn.RNN``/``nn.scan`` over them, as one ONNX Loop.

``nn.RNN`` is ``nn.scan`` over the cell, which JAX traces to one ``scan`` (one
Loop); the cells' Dense layers inside it are the ``linear`` primitive (Gemm)
through the ``Dense`` stand-in. What this module adds is a stand-in for the two
LSTM cells: ``LSTMCell`` runs eight Dense layers (a Gemm per gate and side)
and ``OptimizedLSTMCell`` concatenates the eight kernels inside the step (two
Concats of weights per iteration, a bias Reshape, then two Splits). Both read
the same parameters (``ii``..``io`` without bias, ``hi``..``ho`` with bias), so
the stand-in reads them as the cells do (``DenseParams`` submodules under the
same names, ``module.param``), concatenates the kernels and biases at conversion
time, and binds ``linear`` twice: one Gemm for the input and one for the hidden
state, one Add and one Split into the four gates. That is the cells' own
arithmetic (each gate's column block of the fused product is that gate's
product, and ``a + b`` is added once on all gates instead of per gate).

``GRUCell`` gets the same treatment (its six Dense layers as two Gemms and a
Split each, see :func:`gru_cell`). ``SimpleCell``, ``MGUCell`` and
``ConvLSTMCell`` convert through the Dense/Conv stand-ins and the lax rules as
written. Outside the Loop stay what
Flax itself computes there: the initial carry (zeros: a constant for a static
batch, an Expand to a symbolic one) and, for batch-major inputs, ``nn.scan``'s
move of the time axis to the front and back (two Transposes; none with
``time_major=True``). ``seq_lengths`` adds Flax's gathers (``flip_sequences``,
the last valid carry).
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp

from jax2onnx.plugin import Family, at_conversion, case
from jax2onnx_flax._util import (
    grad_of_squares,
    linen_factory,
    linen_params,
    linen_promoted,
    perturbed,
)
from jax2onnx_flax.linear import linear_p
from jax2onnx_flax.linen import LinenStandIn

family = Family("flax")
register = family.register

GATES = "ifgo"


def _gate_params(module, inputs, h):
    """The cell's per-gate ``(kernel_in, kernel_hidden, bias_hidden)``, read as the cell does."""
    from flax.linen.recurrent import DenseParams

    common = {"features": h.shape[-1], "param_dtype": module.param_dtype}
    params = []
    for gate in GATES:
        k_in, _ = DenseParams(
            use_bias=False, kernel_init=module.kernel_init, name=f"i{gate}", **common
        )(inputs)
        k_h, b_h = DenseParams(
            use_bias=True,
            kernel_init=module.recurrent_kernel_init,
            bias_init=module.bias_init,
            name=f"h{gate}",
            **common,
        )(h)
        params.append((k_in, k_h, b_h))
    return params


def lstm_cell(original, module, carry, inputs):
    """``nn.LSTMCell``/``nn.OptimizedLSTMCell``: two Gemms on the gates' fused kernels."""
    c, h = carry
    k_in, k_h, b_h = zip(*_gate_params(module, inputs, h), strict=True)
    k_in, k_h, b_h = (at_conversion(jnp.concatenate, a, axis=-1) for a in (k_in, k_h, b_h))
    promoter = types.SimpleNamespace(promote_dtype=_promote_dtype, dtype=module.dtype)
    x, k_in = linen_promoted(promoter, (inputs, k_in))
    h, k_h, b_h = linen_promoted(promoter, (h, k_h, b_h))
    gates = linear_p.bind(h, k_h, b_h, precision=None) + linear_p.bind(x, k_in, precision=None)
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    i, f, o = module.gate_fn(i), module.gate_fn(f), module.gate_fn(o)
    new_c = f * c + i * module.activation_fn(g)
    new_h = o * module.activation_fn(new_c)
    return (new_c, new_h), new_h


GRU_LAYERS = ("ir", "iz", "in", "hr", "hz", "hn")  # Flax's Dense submodules, by name


def gru_cell(original, module, carry, inputs):
    """``nn.GRUCell``: one Gemm for the input and one for the hidden state.

    Flax runs six Dense layers: ``ir``, ``iz``, ``in`` with bias on the input,
    ``hr``, ``hz`` without and ``hn`` with bias on the hidden state. Their
    kernels (and biases, zeros standing in for ``hr``/``hz``'s) are joined at
    conversion time; each gate's column block of a product is that Dense's
    output, and the missing biases add a zero ahead of the gate function.
    While initialising (no parameters yet) Flax's method runs. The stored
    parameters are read unboxed (:func:`linen_params`), as the Dense layers get them.
    """
    params = linen_params(module)
    if any(name not in params for name in GRU_LAYERS):
        return original(carry, inputs)
    h = carry

    def joined(names, key):
        def join():
            parts = [
                params[n][key] if key in params[n] else jnp.zeros_like(params[n]["kernel"][0])
                for n in names
            ]
            return jnp.concatenate(parts, axis=-1)

        return at_conversion(join)

    k_i, b_i = joined(GRU_LAYERS[:3], "kernel"), joined(GRU_LAYERS[:3], "bias")
    k_h, b_h = joined(GRU_LAYERS[3:], "kernel"), joined(GRU_LAYERS[3:], "bias")
    promoter = types.SimpleNamespace(promote_dtype=_promote_dtype, dtype=module.dtype)
    x, k_i, b_i = linen_promoted(promoter, (inputs, k_i, b_i))
    hp, k_h, b_h = linen_promoted(promoter, (h, k_h, b_h))
    xr, xz, xn = jnp.split(linear_p.bind(x, k_i, b_i, precision=None), 3, axis=-1)
    hr, hz, hn = jnp.split(linear_p.bind(hp, k_h, b_h, precision=None), 3, axis=-1)
    r = module.gate_fn(xr + hr)
    z = module.gate_fn(xz + hz)
    n = module.activation_fn(xn + r * hn)
    new_h = (1.0 - z) * n + z * h
    return new_h, new_h


def _promote_dtype(*args, dtype=None):
    from flax.linen.dtypes import promote_dtype

    return promote_dtype(*args, dtype=dtype)


LINEN = (
    LinenStandIn("LSTMCell", "__call__", lstm_cell),
    LinenStandIn("OptimizedLSTMCell", "__call__", lstm_cell),
    LinenStandIn("GRUCell", "__call__", gru_cell),
)


# -- cases ----------------------------------------------------------------------------
#
# A Linen cell's carry has the cell's ``param_dtype``, so Flax itself rejects
# float64 inputs to a float32 RNN (the scan carry would change dtype). The
# cases therefore rebuild the module with ``param_dtype`` = the input's dtype
# and apply the same variables (made once in float32, perturbed, and cast):
# the f64 variants compute in float64 throughout. Going through
# ``module.apply`` also compares against Flax's own cell code (a bound module
# is compared against its prepared function, which runs the stand-ins).

T = 3  # sequence length
F = 5  # cell features


def _applied(build, *shapes, arrange=None, wrap=None):
    """A case factory: ``build(nn, dtype).apply(variables, *arrange(module, *inputs))``.

    ``dtype`` is the first input's; ``arrange(module, *inputs)`` returns the call's
    ``(args, kwargs)`` (the inputs as they are by default), also used to ``init``
    on ones of ``shapes``.
    """
    arrange = arrange or (lambda module, *inputs: (inputs, {}))

    def make():
        from flax import linen as nn

        module = build(nn, jnp.float32)
        args, kwargs = arrange(module, *(jnp.ones(s, jnp.float32) for s in shapes))
        variables = perturbed(module.init(jax.random.key(0), *args, **kwargs))
        with jax.enable_x64(True):
            wide = jax.tree.map(lambda v: v.astype(jnp.float64), variables)
        by_dtype = {jnp.dtype(jnp.float32): variables, jnp.dtype(jnp.float64): wide}

        def fn(x, *rest):
            module = build(nn, x.dtype)
            args, kwargs = arrange(module, x, *rest)
            return module.apply(by_dtype[jnp.dtype(x.dtype)], *args, **kwargs)

        return wrap(fn) if wrap is not None else fn

    return make


def _cell(kind, **kw):
    return lambda nn, dtype: getattr(nn, kind)(F, param_dtype=dtype, **kw)


def _rnn(kind, cell_kw=None, **kw):
    return lambda nn, dtype: nn.RNN(_cell(kind, **(cell_kw or {}))(nn, dtype), **kw)


def _bidirectional(nn, dtype):
    return nn.Bidirectional(_rnn("LSTMCell")(nn, dtype), _rnn("GRUCell")(nn, dtype))


def _scanned(nn, dtype):
    """``nn.scan`` over ``LSTMCell`` written out (what ``nn.RNN`` does), time on axis 1."""

    class Scanned(nn.Module):
        @nn.compact
        def __call__(self, x):
            lifted = nn.scan(
                nn.LSTMCell,
                variable_broadcast="params",
                split_rngs={"params": False},
                in_axes=1,
                out_axes=1,
            )
            cell = lifted(F, param_dtype=dtype, name="cell")
            carry = cell.initialize_carry(jax.random.key(0), x[:, 0].shape)
            return cell(carry, x)[1]

    return Scanned()


def _with_lengths(module, x, lengths):
    """``seq_lengths`` from any integers: clipped to ``1..T``."""
    return (x,), {"seq_lengths": jnp.clip(lengths, 1, T).astype(jnp.int32)}


def _step(module, x, *carry):
    """One cell step on a given carry: ``cell(carry, x)``."""
    return ((carry if len(carry) > 1 else carry[0]), x), {}


def _step_from_zero(module, x):
    """One cell step from ``cell.initialize_carry``."""
    return (module.initialize_carry(jax.random.key(0), x.shape), x), {}


def _rnn_case(name, build, inputs=(("B", T, 4),), shapes=((2, T, 4),), **kw):
    kw.setdefault("counts", {"Loop": 1})
    make = _applied(build, *shapes, arrange=kw.pop("arrange", None), wrap=kw.pop("wrap", None))
    return case(name, make, inputs, factory=True, **kw)


def _cell_case(name, kind, n_carry, x_shape=(4,), cell_kw=None, **kw):
    """One step of a cell (no Loop) on a symbolic batch with its carry as inputs."""
    carry_shape = ("B", *x_shape[:-1], F)
    kw.setdefault("counts", {"Loop": 0})
    return _rnn_case(
        name,
        _cell(kind, **(cell_kw or {})),
        inputs=[("B", *x_shape)] + [carry_shape] * n_carry,
        shapes=[(2, *x_shape)] + [(2, *carry_shape[1:])] * n_carry,
        arrange=_step,
        **kw,
    )


LSTM_BODY = ["Gemm -> Add -> Split -> Sigmoid -> Mul -> Add -> Tanh -> Mul"]

family.add_cases(
    linear_p,
    lambda: [
        _rnn_case(
            "linen_rnn_lstm",
            _rnn("LSTMCell"),
            expect=[*LSTM_BODY, f"Loop -> Transpose:Bx{T}x{F}"],
            counts={"Loop": 1, "Gemm": 2, "Split": 1, "Reshape": 0},
        ),
        _rnn_case(
            "linen_rnn_optimized_lstm",
            _rnn("OptimizedLSTMCell"),
            expect=LSTM_BODY,
            counts={"Loop": 1, "Gemm": 2, "Split": 1, "MatMul": 0, "Reshape": 0},
        ),
        _rnn_case(
            "linen_rnn_gru",
            _rnn("GRUCell"),
            expect=["Gemm -> Split -> Add -> Sigmoid"],
            counts={"Loop": 1, "MatMul": 0},
        ),
        _rnn_case(
            "linen_rnn_simple",
            _rnn("SimpleCell"),
            expect=["Gemm -> Add -> Tanh"],
            counts={"Loop": 1, "Gemm": 2, "MatMul": 0},
        ),
    ],
)
CONV_LSTM = {"kernel_size": (3, 3)}

family.add_cases(
    linear_p,
    lambda: [
        _rnn_case(
            "linen_rnn_conv_lstm",
            _rnn("ConvLSTMCell", CONV_LSTM),
            inputs=[("B", 2, 4, 4, 2)],
            shapes=[(1, 2, 4, 4, 2)],
            expect=["Add -> Split -> Sigmoid"],
        ),
        case(
            # the export idiom, to_onnx(model.bind(variables)); f32 only: a float32 RNN
            # cannot take float64 inputs in Flax itself (its carry has the param dtype)
            "linen_rnn_bound",
            linen_factory(lambda nn: nn.RNN(nn.OptimizedLSTMCell(F)), (2, T, 4)),
            [("B", T, 4)],
            factory=True,
            variants=["f32"],
            expect=LSTM_BODY,
            counts={"Loop": 1, "Gemm": 2, "MatMul": 0},
        ),
        _rnn_case("linen_rnn_mgu", _rnn("MGUCell"), expect=["Gemm -> Add -> Sigmoid"]),
        _rnn_case("linen_rnn_reverse", _rnn("LSTMCell", reverse=True), expect=LSTM_BODY),
        _rnn_case(
            "linen_rnn_reverse_keep_order",
            _rnn("GRUCell", reverse=True, keep_order=True),
            expect=["Gemm -> Split -> Add -> Sigmoid"],
        ),
        _rnn_case(
            "linen_rnn_return_carry",
            _rnn("LSTMCell", return_carry=True),
            expect=["Loop:Bx5", f"Loop -> Transpose:Bx{T}x{F}"],
        ),
        _rnn_case(
            "linen_rnn_time_major",
            _rnn("OptimizedLSTMCell", time_major=True),
            inputs=[(T, "B", 4)],
            shapes=[(T, 2, 4)],
            expect=LSTM_BODY,
            counts={"Loop": 1, "Transpose": 0},
        ),
        _rnn_case(
            "linen_rnn_bidirectional",
            _bidirectional,
            # both directions concatenated time-major, then one Transpose to batch-major
            expect=[*LSTM_BODY, f"Loop -> Concat -> Transpose:Bx{T}x{2 * F}"],
            counts={"Loop": 2, "Transpose": 3},
        ),
        _rnn_case(
            "linen_rnn_seq_lengths",
            _bidirectional,
            inputs=[("B", T, 4), ("B",)],
            shapes=[(2, T, 4), (2,)],
            dtypes=[None, jnp.int32],
            arrange=_with_lengths,
            counts={"Loop": 2},
        ),
        _rnn_case("linen_rnn_scan_module", _scanned, expect=LSTM_BODY),
        _rnn_case(
            "linen_rnn_vmap",
            _rnn("LSTMCell"),
            inputs=[("B", 2, T, 4)],
            wrap=jax.vmap,
            expect=["Split -> Sigmoid"],
        ),
        _rnn_case(
            "linen_rnn_grad",
            _rnn("LSTMCell"),
            inputs=[(2, T, 4)],
            wrap=grad_of_squares,
            counts={"Loop": 2},
        ),
        _cell_case(
            "linen_lstm_cell_step",
            "LSTMCell",
            2,
            expect=LSTM_BODY,
            counts={"Loop": 0, "Gemm": 2},
        ),
        _cell_case(
            "linen_optimized_lstm_cell_step",
            "OptimizedLSTMCell",
            2,
            expect=LSTM_BODY,
            counts={"Loop": 0, "Gemm": 2, "Concat": 0},
        ),
        _cell_case(
            "linen_gru_cell_step",
            "GRUCell",
            1,
            expect=["Gemm -> Split -> Add -> Sigmoid"],
            counts={"Loop": 0, "Gemm": 2},
        ),
        _cell_case("linen_simple_cell_step", "SimpleCell", 1, expect=["Gemm -> Add -> Tanh"]),
        _cell_case(
            "linen_simple_cell_residual_step",
            "SimpleCell",
            1,
            cell_kw={"residual": True},
            expect=["Gemm -> Add -> Add -> Tanh"],
        ),
        _cell_case(
            "linen_conv_lstm_cell_step",
            "ConvLSTMCell",
            2,
            x_shape=(4, 4, 2),
            cell_kw=CONV_LSTM,
            expect=["Add -> Split -> Sigmoid"],
        ),
        _rnn_case(
            "linen_lstm_cell_step_initialized_carry",
            _cell("LSTMCell"),
            inputs=[("B", 4)],
            shapes=[(2, 4)],
            arrange=_step_from_zero,
            expect=LSTM_BODY,
            counts={"Loop": 0},
        ),
    ],
)
