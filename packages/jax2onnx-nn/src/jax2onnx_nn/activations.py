"""Elementwise activations of ``jax.nn`` as macro primitives.

Each ``jax.nn.<name>`` is intercepted while ``to_onnx`` traces and binds the
macro primitive ``nn.<name>``; the lowering emits the ONNX activation op a
human would write (``Gelu``, ``Elu``, ``HardSwish`` ...). ONNX Runtime has
many of these ops in float32 only: bfloat16 and float16 emit the op too (computed
in float32 between Casts, as XLA does), other dtypes (float64, integers) inline
JAX's own decomposition, lowered by jax2onnx-lax, so the numbers are exactly
JAX's. Batching is ``"elementwise"`` (the batched call is the same
primitive); the JVP is ``"fallback"`` (JAX's derivative of the original
function, whose primitives the lax lowerings cover).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jax2onnx.plugin import Family, case, kernel_dtypes
from jax2onnx_nn._util import F32, FLOATS, macro

family = Family("nn")
register = family.register

# JAX's SELU constants (jax.nn.selu).
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946

EDGES = np.array(
    [0.0, -0.0, 1e-7, -1e-7, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, 7.0, -7.0]
    + [30.0, -30.0, 100.0, -100.0, 1e30, -1e30, np.inf, -np.inf, np.nan]
)


def _static_rest(arguments: dict[str, Any]) -> bool:
    """Bind only calls whose options are Python numbers (an array option runs the original)."""
    values = list(arguments.values())[1:]
    return all(isinstance(v, (bool, int, float)) for v in values)


def _cases(
    name: str,
    fn: Callable[..., Any],
    op_expect: str,
    *,
    counts: dict[str, int] | None = None,
    f64_counts: dict[str, int] | None = None,
    input_range: tuple[float, float] = (-6.0, 6.0),
    edges: bool = True,
    grad: bool = True,
    halves: Sequence[str] = ("bf16",),
    halves_on_edges: bool = False,
) -> list[Any]:
    """The standard cases of an activation called as ``fn(x)`` (through ``jax.nn``).

    ``halves`` (``"bf16"``, ``"f16"``) run on the first case, or on the edges case
    with ``halves_on_edges`` (a form of several ops, whose path the precision step's
    Casts interrupt in bfloat16).
    """
    main_halves = () if halves_on_edges else tuple(halves)
    edge_halves = tuple(halves) if halves_on_edges else ()
    out = [
        case(
            name,
            fn,
            [("B", 7)],
            expect=[f"{op_expect}:Bx7"],
            counts=counts,
            variants=["f32", *main_halves],
            input_range=input_range,
        ),
        case(
            f"{name}_f64",
            fn,
            [("B", 7)],
            counts=f64_counts,
            variants=["f64"],
            input_range=input_range,
        ),
        case(
            f"{name}_vmap",
            jax.vmap(fn),
            [("B", 2, 3)],
            expect=[f"{op_expect}:Bx2x3"],
            counts=counts,
            variants=["f32"],
            input_range=input_range,
        ),
        case(
            f"{name}_vmap_f64",
            jax.vmap(fn),
            [("B", 2, 3)],
            variants=["f64"],
            input_range=input_range,
        ),
    ]
    if edges:
        out.append(case(f"{name}_edges", fn, [EDGES], variants=["f32", "f64", *edge_halves]))
    if grad:
        out.append(
            case(f"{name}_grad", jax.grad(lambda x: fn(x).sum()), [("B",)], input_range=input_range)
        )
    return out


def _activation(
    name: str,
    impl: Callable[..., Any],
    build: Callable[..., Any] | None,
    doc: str,
    cases: Sequence[Any],
    *,
    native: Sequence[Any] | None = None,
    min_opset: int = 1,
    targets: Sequence[str] | None = None,
    jvp: Any = "fallback",
) -> Any:
    """Declare ``nn.<name>``: interception, lowering(s) and cases.

    Calls whose options (``alpha``, ``approximate`` ...) are not Python numbers
    run the original function.

    ``build(ctx, x, **params)`` emits the ONNX form for operands of a
    ``native`` dtype (those ONNX Runtime has kernels for) at ``min_opset`` and
    newer; everything else (and older opsets) inlines JAX's decomposition of
    ``impl``, the primitive's fallback.
    """
    prim = macro(family, name, impl, targets or [f"jax.nn.{name}"], jvp=jvp, accept=_static_rest)

    def decomposed(ctx, x, **params):
        return ctx.fallback()

    decomposed.__name__ = decomposed.__qualname__ = f"{name}_decomposed"
    decomposed.__doc__ = f"JAX's decomposition of jax.nn.{name}, inlined (opsets before the op)."

    if build is None:
        decomposed.__doc__ = f"JAX's decomposition of jax.nn.{name}, inlined: no ONNX op has it."
        family.lowering(prim, cases=cases)(decomposed)
        return prim

    def lower(ctx, x, **params):
        return build(ctx, x, **params)

    lower.__name__ = lower.__qualname__ = name
    lower.__doc__ = doc + " Other dtypes inline JAX's decomposition (ORT has no kernel)."
    family.lowering(prim, min_opset=min_opset, native_dtypes=native, cases=cases)(lower)
    if min_opset > 1:
        family.lowering(prim)(decomposed)
    return prim


_NN = jax.nn  # the originals, captured before any interception patches them
# ``native``: kernel_dtypes(...) where the form's ops are in the core's ONNX Runtime kernel
# table; the Clip forms and the several-op forms without such an op name the float dtypes.

relu_p = _activation(
    "relu",
    _NN.relu,
    lambda ctx, x: ctx.op.Relu(x),
    "One Relu.",
    lambda: [
        *_cases("relu", lambda x: jax.nn.relu(x), "Relu", f64_counts={"Relu": 1}),
        case("relu_int32", lambda x: jax.nn.relu(x), [(5,)], dtypes=[np.int32]),
    ],
    native=kernel_dtypes("Relu"),
)
relu6_p = _activation(
    "relu6",
    _NN.relu6,
    lambda ctx, x: ctx.op.Clip(x, 0.0, 6.0),
    "``Clip(x, 0, 6)``.",
    lambda: _cases("relu6", lambda x: jax.nn.relu6(x), "Clip", input_range=(-9.0, 9.0)),
    native=FLOATS,
)
sigmoid_p = _activation(
    "sigmoid",
    _NN.sigmoid,
    lambda ctx, x: ctx.op.Sigmoid(x),
    "One Sigmoid.",
    lambda: _cases("sigmoid", lambda x: jax.nn.sigmoid(x), "Sigmoid", f64_counts={"Sigmoid": 1}),
    native=kernel_dtypes("Sigmoid"),
)
log_sigmoid_p = _activation(
    "log_sigmoid",
    _NN.log_sigmoid,
    lambda ctx, x: ctx.op.Neg(ctx.op.Softplus(ctx.op.Neg(x))),
    "``-Softplus(-x)``: stable for large |x| (``Log(Sigmoid(x))`` underflows).",
    lambda: _cases(
        "log_sigmoid",
        lambda x: jax.nn.log_sigmoid(x),
        "Neg -> Softplus -> Neg",
        f64_counts={"Softplus": 0},
        halves_on_edges=True,
    ),
    native=kernel_dtypes("Neg", "Softplus"),
)
softplus_p = _activation(
    "softplus",
    _NN.softplus,
    lambda ctx, x: ctx.op.Softplus(x),
    "One Softplus.",
    lambda: _cases(
        "softplus", lambda x: jax.nn.softplus(x), "Softplus", f64_counts={"Softplus": 0}
    ),
    native=kernel_dtypes("Softplus"),
)
soft_sign_p = _activation(
    "soft_sign",
    _NN.soft_sign,
    lambda ctx, x: ctx.op.Softsign(x),
    "One Softsign.",
    lambda: _cases(
        "soft_sign", lambda x: jax.nn.soft_sign(x), "Softsign", f64_counts={"Softsign": 0}
    ),
    native=kernel_dtypes("Softsign"),
)
silu_p = _activation(
    "silu",
    _NN.silu,
    lambda ctx, x: ctx.op.Mul(x, ctx.op.Sigmoid(x)),
    "``x * Sigmoid(x)`` (ONNX has no Swish/SiLU op).",
    lambda: [
        *_cases(
            "silu",
            lambda x: jax.nn.silu(x),
            "Sigmoid -> Mul",
            counts={"Sigmoid": 1},
            halves_on_edges=True,
        ),
        case("swish", lambda x: jax.nn.swish(x), [("B", 3)], expect=["Sigmoid -> Mul:Bx3"]),
    ],
    native=kernel_dtypes("Sigmoid", "Mul"),
    targets=["jax.nn.silu", "jax.nn.swish"],
)
elu_p = _activation(
    "elu",
    _NN.elu,
    lambda ctx, x, alpha: ctx.op.Elu(x, alpha=float(alpha)),
    "One Elu with ``alpha``.",
    lambda: [
        *_cases("elu", lambda x: jax.nn.elu(x), "Elu", f64_counts={"Elu": 0}),
        case("elu_alpha", lambda x: jax.nn.elu(x, 0.5), [(2, 3)], expect=["Elu"], variants=["f32"]),
        case("elu_alpha_array", lambda x, a: jax.nn.elu(x, a), [(2, 3), ()]),
    ],
    native=kernel_dtypes("Elu"),
)


def _celu(ctx, x, alpha):
    dtype = ctx.avals_in[0].dtype
    y = ctx.op.Celu(ctx.cast(x, F32), alpha=float(alpha))
    return ctx.cast(y, dtype)


celu_p = _activation(
    "celu",
    _NN.celu,
    lambda ctx, x, alpha: _celu(ctx, x, alpha),
    "One Celu with ``alpha`` (ONNX defines Celu for float32 only: bfloat16 and float16 "
    "compute it in float32 between Casts).",
    lambda: [
        *_cases(
            "celu",
            lambda x: jax.nn.celu(x),
            "Celu",
            f64_counts={"Celu": 0},
            halves=("bf16", "f16"),
            halves_on_edges=True,  # Casts around the float32 Celu
        ),
        case(
            "celu_alpha", lambda x: jax.nn.celu(x, 2.0), [(2, 3)], expect=["Celu"], variants=["f32"]
        ),
        case("celu_alpha_f64", lambda x: jax.nn.celu(x, 2.0), [(2, 3)], variants=["f64"]),
    ],
    native=kernel_dtypes("Celu"),
    min_opset=12,
)
selu_p = _activation(
    "selu",
    _NN.selu,
    lambda ctx, x: ctx.op.Selu(x, alpha=_SELU_ALPHA, gamma=_SELU_SCALE),
    "One Selu with JAX's alpha and scale.",
    lambda: _cases("selu", lambda x: jax.nn.selu(x), "Selu", f64_counts={"Selu": 0}),
    native=kernel_dtypes("Selu"),
)
leaky_relu_p = _activation(
    "leaky_relu",
    _NN.leaky_relu,
    lambda ctx, x, negative_slope: ctx.op.LeakyRelu(x, alpha=float(negative_slope)),
    "One LeakyRelu with ``alpha = negative_slope``.",
    lambda: [
        *_cases(
            "leaky_relu", lambda x: jax.nn.leaky_relu(x), "LeakyRelu", f64_counts={"LeakyRelu": 0}
        ),
        case(
            "leaky_relu_slope",
            lambda x: jax.nn.leaky_relu(x, negative_slope=0.2),
            [(2, 3)],
            expect=["LeakyRelu"],
            variants=["f32"],
        ),
    ],
    native=kernel_dtypes("LeakyRelu"),
)
hard_tanh_p = _activation(
    "hard_tanh",
    _NN.hard_tanh,
    lambda ctx, x: ctx.op.Clip(x, -1.0, 1.0),
    "``Clip(x, -1, 1)``.",
    lambda: _cases("hard_tanh", lambda x: jax.nn.hard_tanh(x), "Clip", input_range=(-3.0, 3.0)),
    native=FLOATS,
)
hard_sigmoid_p = _activation(
    "hard_sigmoid",
    _NN.hard_sigmoid,
    lambda ctx, x: ctx.op.HardSigmoid(x, alpha=1.0 / 6.0, beta=0.5),
    "``HardSigmoid(alpha=1/6, beta=0.5)`` = ``relu6(x + 3) / 6``.",
    lambda: _cases(
        "hard_sigmoid",
        lambda x: jax.nn.hard_sigmoid(x),
        "HardSigmoid",
        f64_counts={"HardSigmoid": 0},
    ),
    native=kernel_dtypes("HardSigmoid"),
)
hard_silu_p = _activation(
    "hard_silu",
    _NN.hard_silu,
    lambda ctx, x: ctx.op.HardSwish(x),
    "One HardSwish (``x * relu6(x + 3) / 6``).",
    lambda: [
        *_cases(
            "hard_silu", lambda x: jax.nn.hard_silu(x), "HardSwish", f64_counts={"HardSwish": 0}
        ),
        case(
            "hard_swish",
            lambda x: jax.nn.hard_swish(x),
            [(2, 3)],
            expect=["HardSwish"],
            variants=["f32"],
        ),
    ],
    native=kernel_dtypes("HardSwish"),
    min_opset=14,
    targets=["jax.nn.hard_silu", "jax.nn.hard_swish"],
)
mish_p = _activation(
    "mish",
    _NN.mish,
    lambda ctx, x: ctx.op.Mish(x),
    "One Mish (``x * tanh(softplus(x))``).",
    lambda: [
        *_cases("mish", lambda x: jax.nn.mish(x), "Mish", f64_counts={"Mish": 0}),
        case("mish_opset17", lambda x: jax.nn.mish(x), [(2, 3)], opset=17, counts={"Mish": 0}),
    ],
    native=kernel_dtypes("Mish"),
    min_opset=18,
)
gelu_p = _activation(
    "gelu",
    _NN.gelu,
    lambda ctx, x, approximate: ctx.op.Gelu(x, approximate="tanh" if approximate else "none"),
    "One Gelu (``approximate='tanh'`` or ``'none'``).",
    lambda: [
        *_cases(
            "gelu",
            lambda x: jax.nn.gelu(x),
            "Gelu",
            counts={"Tanh": 0},
            f64_counts={"Gelu": 0},
            halves=("bf16", "f16"),
        ),
        *_cases(
            "gelu_exact",
            lambda x: jax.nn.gelu(x, approximate=False),
            "Gelu",
            counts={"Erf": 0},
            f64_counts={"Gelu": 0},
            halves=("bf16", "f16"),
        ),
        case(
            "gelu_array_option",
            lambda x: jax.nn.gelu(x, np.bool_(False)),
            [(2, 3)],
            variants=["f32"],
            counts={"Gelu": 1},  # not intercepted (an array option): the fusion pass finds it
        ),
        case(
            "gelu_array_option_f64",
            lambda x: jax.nn.gelu(x, np.bool_(False)),
            [(2, 3)],
            variants=["f64"],
            counts={"Gelu": 0},  # no float64 Gelu kernel: the decomposition stays
        ),
        case("gelu_opset18", lambda x: jax.nn.gelu(x), [(2, 3)], opset=18, counts={"Gelu": 0}),
        case(
            "gelu_exact_opset19",
            lambda x: jax.nn.gelu(x, False),
            [(2, 3)],
            opset=19,
            counts={"Gelu": 0},
        ),
    ],
    native=kernel_dtypes("Gelu"),
    min_opset=20,
)
squareplus_p = _activation(
    "squareplus",
    _NN.squareplus,
    lambda ctx, x, b: ctx.op.Div(ctx.op.Add(x, ctx.op.Sqrt(ctx.op.Add(ctx.op.Mul(x, x), b))), 2),
    "``(x + Sqrt(x*x + b)) / 2`` (no ONNX op).",
    lambda: [
        *_cases(
            "squareplus",
            lambda x: jax.nn.squareplus(x),
            "Mul -> Add -> Sqrt -> Add -> Div",
            halves_on_edges=True,
        ),
        case("squareplus_b", lambda x: jax.nn.squareplus(x, 1.5), [(2, 3)]),
    ],
    native=FLOATS,
)


def _sparse_plus(ctx, x):
    t = ctx.op.Add(x, 1.0)
    middle = ctx.op.Div(ctx.op.Mul(t, t), 4.0)
    upper = ctx.op.Where(ctx.op.GreaterOrEqual(x, 1.0), x, middle)
    zero = ctx.const(np.zeros((), np.dtype(ctx.avals_in[0].dtype)))
    return ctx.op.Where(ctx.op.LessOrEqual(x, -1.0), zero, upper)


sparse_plus_p = _activation(
    "sparse_plus",
    _NN.sparse_plus,
    _sparse_plus,
    "``0`` below -1, ``x`` above 1, ``(x + 1)**2 / 4`` between: two Where (no ONNX op).",
    lambda: _cases(
        "sparse_plus", lambda x: jax.nn.sparse_plus(x), "Where", input_range=(-2.0, 2.0)
    ),
    native=FLOATS,
)
sparse_sigmoid_p = _activation(
    "sparse_sigmoid",
    _NN.sparse_sigmoid,
    lambda ctx, x: ctx.op.Mul(ctx.op.Clip(ctx.op.Add(x, 1.0), 0.0, 2.0), 0.5),
    "``0.5 * Clip(x + 1, 0, 2)``, which the fusion pass makes one ``HardSigmoid(0.5, 0.5)``.",
    lambda: _cases(
        "sparse_sigmoid",
        lambda x: jax.nn.sparse_sigmoid(x),
        "HardSigmoid",
        input_range=(-2.0, 2.0),
        halves_on_edges=True,  # the fusion to HardSigmoid is a float32 one
    ),
    native=FLOATS,
)
log1mexp_p = _activation(
    "log1mexp",
    _NN.log1mexp,
    None,
    "",
    lambda: [
        case(
            "log1mexp",
            lambda x: jax.nn.log1mexp(x),
            [("B", 7)],
            input_range=(0.01, 5.0),
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "log1mexp_vmap",
            jax.vmap(lambda x: jax.nn.log1mexp(x)),
            [("B", 2, 3)],
            input_range=(0.01, 5.0),
        ),
        case(
            "log1mexp_grad",
            jax.grad(lambda x: jax.nn.log1mexp(x).sum()),
            [("B",)],
            input_range=(0.01, 5.0),
        ),
        case(
            "log1mexp_edges",
            lambda x: jax.nn.log1mexp(x),
            [np.array([0.0, 1e-7, 0.5, 0.6931, 0.7, 3.0, 50.0, np.inf, np.nan])],
        ),
    ],
)
identity_p = _activation(
    "identity",
    _NN.identity,
    lambda ctx, x: ctx.op.Identity(x),
    "One Identity.",
    lambda: [
        *_cases("identity", lambda x: jax.nn.identity(x), "Identity", grad=False),
        case("identity_grad", jax.grad(lambda x: (jax.nn.identity(x) * x).sum()), [("B",)]),
        case("identity_int32", lambda x: jax.nn.identity(x) + 1, [(4,)], dtypes=[np.int32]),
    ],
    native=(*FLOATS, np.int32, np.int64, np.bool_, np.float16),
)
