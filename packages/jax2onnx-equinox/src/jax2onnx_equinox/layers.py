"""``eqx.nn`` Embedding, PReLU and Dropout; cases for Sequential, Lambda and StatefulLayer.

- ``Embedding`` takes ONE scalar index (users vmap it over token sequences):
  the macro primitive ``eqx_embedding`` binds again under ``jax.vmap`` with the
  whole index tensor, so any number of vmaps is one ``Gather``.
- ``PReLU`` -> ``PRelu`` (the slope broadcasts from the right, as Equinox's
  ``jnp.where(x >= 0, x, slope * x)`` does, and stays so under vmap).
- ``Dropout``: in inference mode (what ``to_onnx`` pins) Equinox's method is
  the identity and nothing is exported. With ``input_params={"inference":
  flag}`` the flag is a graph input: the stand-in computes Equinox's training
  branch with the key the caller passes (JAX's own random bits) and selects
  with one ``Where`` instead of tracing Equinox's Python ``if`` once per value.
  Without a key (Equinox itself cannot run the training branch then) it binds
  ``nn.dropout`` (:mod:`jax2onnx_nn.dropout`): ONNX ``Dropout`` with
  ``training_mode=Not(inference)``, whose mask is ONNX Runtime's own draw.
- ``Sequential``, ``Lambda`` and ``StatefulLayer`` call their layers as plain
  Python: they need no primitive, and their cases show the layers inside keep
  their single ops.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, at_conversion, case, kernel_dtypes
from jax2onnx_equinox._util import eqx_factory, factory_cases, grad_of_squares, vmapped, x_batched
from jax2onnx_nn.dropout import switched

family = Family("equinox")
register = family.register


def _randomised(module, seed=1):
    from jax2onnx_equinox._norm_cases import randomised

    return randomised(module, seed)


# -- Embedding -------------------------------------------------------------------------


def _embedding_impl(indices, weight):
    """Equinox's ``weight[x]`` for any index shape (negative indices wrap, others clamp)."""
    return weight[indices]


def _bind_embedding(indices, weight):
    return embedding_p.bind(indices, weight), 0


embedding_p = family.primitive(
    "eqx_embedding",
    impl=_embedding_impl,
    batching=x_batched(_embedding_impl, _bind_embedding),
    jvp="fallback",
)


def _embedding_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        if (
            not isinstance(x, (jax.Array, np.ndarray, np.generic, int))
            or jnp.shape(x) != ()
            or not jnp.issubdtype(jnp.result_type(x), jnp.integer)
            or self.num_embeddings == 0
        ):
            return original(self, x, key=key)
        return embedding_p.bind(jnp.asarray(x), self.weight)

    return call


family.intercept("equinox.nn.Embedding.__call__", embedding_p, binder=_embedding_binder)


def _embedding(wrap=None):
    return eqx_factory(lambda eqx, key: eqx.nn.Embedding(6, 4, key=key), wrap)


def _tokens(embedding):
    """``vmap(vmap(embedding))``: a batch of token sequences."""
    return jax.vmap(jax.vmap(embedding))


_EDGE_INDICES = np.array([[0, 5, -1, -6, -7, 6], [100, -100, 3, 2, 1, 0]], np.int64)
_I32 = [np.int32]


def _embedding_cases():
    return [
        case(
            "eqx_embedding_tokens",
            _embedding(_tokens),
            [("B", 7)],
            dtypes=_I32,
            input_range=(-9, 9),  # out-of-range indices clamp, as JAX's indexing does
            factory=True,
            expect=["Clip -> Gather:Bx7x4"],
            counts={"Gather": 1},
        ),
        case(
            "eqx_embedding_int64_edges",
            _embedding(_tokens),
            [_EDGE_INDICES],
            factory=True,
            expect=["Clip -> Gather:2x6x4"],
            variants=["f64"],
        ),
        case(
            "eqx_embedding_scalar",
            _embedding(),
            [np.array(4, np.int32)],
            factory=True,
            expect=["Clip -> Gather:4"],
        ),
        case(
            "eqx_embedding_uint8",
            _embedding(vmapped),
            [np.array([0, 5, 6, 255], np.uint8)],
            factory=True,
            expect=["Gather:4x4"],
        ),
    ]


@family.lowering(embedding_p, cases=_embedding_cases)
def embedding(ctx, indices, weight):
    """One Gather of the table over the whole index tensor.

    JAX's indexing wraps negative indices and clamps the others into range;
    Gather wraps ``[-n, 0)`` itself and rejects the rest, so a ``Clip`` to
    ``[-n, n - 1]`` gives JAX's row for every index. Index dtypes Gather
    does not take are cast (to int32, or int64 for 32/64-bit unsigned).
    """
    dtype = np.dtype(ctx.avals_in[0].dtype)
    n = int(ctx.avals_in[1].shape[0])
    if dtype.kind == "u" and dtype.itemsize == 8:
        indices = ctx.minimum(indices, np.asarray(n - 1, dtype))
    if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        dtype = np.dtype(np.int64 if dtype.itemsize >= 4 else np.int32)
        indices = ctx.cast(indices, dtype)
    safe = ctx.op.Clip(indices, np.asarray(-n, dtype), np.asarray(n - 1, dtype))
    return ctx.op.Gather(weight, safe, axis=0)


# -- PReLU -----------------------------------------------------------------------------


def _prelu_impl(x, slope):
    return jnp.where(x >= 0, x, slope * x)


def _bind_prelu(x, slope):
    return prelu_p.bind(x, slope), 0


prelu_p = family.primitive(
    "eqx_prelu", impl=_prelu_impl, batching=x_batched(_prelu_impl, _bind_prelu), jvp="fallback"
)


def _prelu_binder(original):
    @functools.wraps(original)
    def call(self, x):
        slope = self.negative_slope
        with jax.numpy_dtype_promotion("standard"):
            dtype = jnp.result_type(x, slope)
        shape = jnp.shape(x)
        if (
            not jnp.issubdtype(jnp.result_type(x), jnp.floating)
            or not jnp.issubdtype(dtype, jnp.floating)
            or jnp.ndim(slope) > len(shape)
            or jnp.broadcast_shapes(jnp.shape(slope), shape) != shape
        ):
            return original(self, x)
        slope = at_conversion(jnp.asarray, slope, dtype)
        return prelu_p.bind(jnp.asarray(x).astype(dtype), slope)

    return call


family.intercept("equinox.nn.PReLU.__call__", prelu_p, binder=_prelu_binder)


def _prelu(*args, wrap=vmapped):
    return eqx_factory(lambda eqx, key: _randomised(eqx.nn.PReLU(*args)), wrap)


def _prelu_cases():
    return [
        (
            "eqx_prelu",
            _prelu(),
            [("B", 6)],
            {"expect": ["PRelu:Bx6"], "counts": {"Where": 0}, "variants": ["f32", "bf16"]},
        ),
        ("eqx_prelu_f64", _prelu(), [("B", 6)], {"counts": {"PRelu": 0}, "variants": ["f64"]}),
        (
            "eqx_prelu_channels",
            _prelu(jnp.full((3, 1, 1), 0.25)),
            [("B", 3, 4, 4)],
            {"expect": ["PRelu:Bx3x4x4"], "counts": {"Where": 0}, "variants": ["f32"]},
        ),
        ("eqx_prelu_grad", _prelu(wrap=lambda m: grad_of_squares(vmapped(m))), [("B", 6)], {}),
    ]


@family.lowering(
    prelu_p, native_dtypes=kernel_dtypes("PRelu"), cases=lambda: factory_cases(_prelu_cases())
)
def prelu(ctx, x, slope):
    """``PRelu(x, slope)``: ``x`` where ``x >= 0`` (NaN, -0 as in JAX), else ``slope * x``.

    ONNX Runtime runs PRelu in float32 only: float64 inlines Equinox's ``Where``.
    """
    return ctx.op.PRelu(x, slope)


# -- Dropout ---------------------------------------------------------------------------


def _dropout_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None, inference=None, deterministic=None):
        flag = self.inference if inference is None else inference
        p = self.p
        if (
            not isinstance(flag, jax.core.Tracer)
            or deterministic is not None
            or (isinstance(p, (int, float)) and p == 0)
        ):
            return original(self, x, key=key, inference=inference, deterministic=deterministic)
        if key is None:  # no key to draw JAX's mask with: ONNX Dropout draws its own
            if not isinstance(p, (int, float)):
                return original(self, x, key=key, inference=inference, deterministic=deterministic)
            return switched(x, flag, p)
        q = 1 - jax.lax.stop_gradient(p)
        mask = jax.random.bernoulli(key, q, jnp.shape(x))
        dropped = jnp.where(mask, x / q, 0)
        return jnp.where(jnp.asarray(flag, bool), x, dropped)

    return call


family.intercept("equinox.nn.Dropout.__call__", None, binder=_dropout_binder)


def _dropout_runtime(eqx, key):
    drop = eqx.nn.Dropout(0.5)
    return lambda x, key, inference: drop(x, key=key, inference=inference)


def _dropout_keyless(eqx, key):
    """A runtime ``inference`` flag and no key: the export's training mode is ONNX's draw."""
    drop = eqx.nn.Dropout(0.5)
    return lambda x, inference: drop(x, inference=inference)


def _dropout_in_sequential(eqx, key):
    """A Sequential left in training mode (Dropout(0.5) active): export pins inference."""
    k1, k2 = jax.random.split(key)
    layers = [eqx.nn.Linear(4, 6, key=k1), eqx.nn.Dropout(0.5), eqx.nn.Lambda(jax.nn.relu)]
    return jax.vmap(_randomised(eqx.nn.Sequential(layers)))


_KEY = np.array([0, 42], np.uint32)  # a raw ``jax.random.PRNGKey`` passed as an input
_RANDOM_OPS = {"Where": 0, "BitShift": 0, "RandomUniform": 0, "Dropout": 0, "Bernoulli": 0}

family.add_cases(
    "eqx_dropout",
    lambda: [
        case(
            "eqx_dropout_inference",
            eqx_factory(_dropout_in_sequential),
            [("B", 4)],
            factory=True,
            expect=["Gemm -> Relu:Bx6"],
            counts=_RANDOM_OPS,
        ),
        case(
            "eqx_dropout_runtime_flag",
            eqx_factory(_dropout_runtime),
            [("B", 6), _KEY],
            input_params={"inference": True},
            factory=True,
            expect=["Where:Bx6"],
        ),
        case(
            "eqx_dropout_runtime_flag_keyless",
            eqx_factory(_dropout_keyless),
            [("B", 6)],
            input_params={"inference": True},
            factory=True,
            expect=["Not -> Dropout -> Where:Bx6"],
        ),
        case(
            "eqx_dropout_runtime_flag_false",
            eqx_factory(_dropout_runtime),
            [("B", 6), _KEY],
            input_params={"inference": False},
            factory=True,
            expect=["Where:Bx6"],
        ),
    ],
)


# -- Sequential, Lambda, StatefulLayer -------------------------------------------------


def _current(fn):
    """What a conversion currently puts in ``fn``'s place in ``jax.nn`` (``fn`` otherwise).

    A module field holds the function object it was built with (``Lambda(jax.nn.relu)``),
    taken before the conversion intercepts ``jax.nn.relu``: calling the intercepting
    dispatcher (which wraps that very object) gives the call its single ONNX op.
    """
    name = getattr(fn, "__name__", None)
    current = getattr(jax.nn, name, None) if isinstance(name, str) else None
    if current is not None and current is not fn and getattr(current, "__wrapped__", None) is fn:
        return current
    return fn


def _lambda_binder(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        return _current(self.fn)(x)

    return call


family.intercept("equinox.nn.Lambda.__call__", None, binder=_lambda_binder)


def _sequential(eqx, key):
    k1, k2 = jax.random.split(key)
    layers = [eqx.nn.Linear(4, 8, key=k1), eqx.nn.Lambda(jax.nn.relu), eqx.nn.Linear(8, 3, key=k2)]
    return eqx.nn.Sequential(layers)


def _sequential_batch_norm(eqx, key):
    """A stateful Sequential (Linear, BatchNorm, relu) vmapped with its state."""
    from jax2onnx_equinox._norm_cases import batch_norm_with_state

    bn, state = batch_norm_with_state(eqx, 8)
    layers = [eqx.nn.Linear(4, 8, key=key), bn, eqx.nn.Lambda(jax.nn.relu)]
    seq = eqx.nn.Sequential(layers)
    axes = dict(axis_name="batch", in_axes=(0, None), out_axes=(0, None))
    return lambda x: jax.vmap(seq, **axes)(x, state)[0]


def _stateful_layer(eqx, key):
    """A Sequential holding a user's StatefulLayer (adds a shift kept in the state), vmapped."""

    class Shift(eqx.nn.StatefulLayer):
        index: eqx.nn.StateIndex

        def __init__(self, size):
            self.index = eqx.nn.StateIndex(jnp.linspace(-1.0, 1.0, size))

        def __call__(self, x, state, *, key=None):
            return x + state.get(self.index), state

    k1, k2 = jax.random.split(key)
    layers = [eqx.nn.Linear(4, 6, key=k1), Shift(6), eqx.nn.Lambda(jnp.tanh)]
    seq, state = eqx.nn.make_with_state(eqx.nn.Sequential)(layers)
    return lambda x: jax.vmap(seq, in_axes=(0, None), out_axes=(0, None))(x, state)[0]


family.add_cases(
    "eqx_sequential",
    lambda: factory_cases(
        [
            (
                "eqx_sequential",
                eqx_factory(_sequential, vmapped),
                [("B", 4)],
                {"expect": ["Gemm -> Relu -> Gemm:Bx3"]},
            ),
            (
                "eqx_sequential_batch_norm",
                eqx_factory(_sequential_batch_norm),
                [("B", 4)],
                {"expect": ["Gemm -> Relu:Bx8"], "counts": {"BatchNormalization": 0}},  # folded
            ),
            (
                "eqx_stateful_layer",
                eqx_factory(_stateful_layer),
                [("B", 4)],
                {"expect": ["Gemm -> Add -> Tanh:Bx6"]},
            ),
        ]
    ),
)
