"""Flax Linen ``Dropout``, ``Embed``, ``SpectralNorm`` and ``WeightNorm``.

- ``Dropout``: nothing in inference (``deterministic`` pinned, or True); a
  traced ``deterministic`` (a runtime input) binds the NNX ``dropout``
  primitive (``Dropout(x, ratio, training_mode=Not(deterministic))``, whose
  training-time mask is ONNX Runtime's draw, not JAX's; the ``rng`` argument
  is then unused); a concrete False with nothing pinned runs Flax's own
  method (JAX's random bits, through the lax lowerings) when it has a key
  (``rng``, or a ``dropout`` stream in ``apply(..., rngs=...)``); without
  one (a bound model exported with its own ``train`` flag as an input), where
  Flax would refuse, it binds the primitive in training mode as an exported
  NNX ``Dropout`` does.
- ``Embed``: the NNX ``embed`` primitive (one Gather, with JAX's fill value
  for out-of-range indices) and ``attend`` as ``embed_attend`` (one Gemm with
  ``transB``), the table promoted with the layer's ``promote_dtype`` as Flax
  does. ``num_embeddings == 1`` (a broadcast) and non-integer indices (which
  Flax rejects) run Flax's own method.
- ``SpectralNorm`` and ``WeightNorm``: the wrapped layer's variables are
  normalised from stored arrays only (power iteration on the kernel and the
  stored ``u``; l2 norms and scales), so Flax's own method runs with constant
  folding on (``jax.ensure_compile_time_eval``): the normalised kernel is
  computed at conversion time with JAX's numbers and the graph is the inner
  layer's op (Gemm, Conv) on a constant kernel. Parameters that are traced
  (differentiated, or graph inputs) stay in the graph as Flax's arithmetic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, at_conversion, case
from jax2onnx_flax._util import grad_of_squares, linen_factory, linen_promoted, via_apply
from jax2onnx_flax.conv import conv_p
from jax2onnx_flax.embed import attend_p, embed_p
from jax2onnx_flax.linear import linear_p
from jax2onnx_flax.linen import LinenStandIn, merged
from jax2onnx_nn.dropout import dropout_p, switched

family = Family("flax")
register = family.register


def dropout(original, module, inputs, deterministic=None, rng=None):
    """``nn.Dropout.__call__``: identity, the ``dropout`` primitive, or Flax's own method."""
    flag = merged(module, "deterministic", deterministic)
    traced = isinstance(flag, jax.core.Tracer)
    if module.rate == 0.0 or (not traced and flag):
        return inputs
    keyed = rng is not None or module.has_rng(module.rng_collection)
    if not traced and (keyed or module.rate == 1.0):
        return original(inputs, deterministic, rng)
    return switched(inputs, flag, module.rate, module.broadcast_dims)


def embed(original, module, inputs):
    """``nn.Embed.__call__``: the ``embed`` primitive on ``(indices, table)``."""
    if module.num_embeddings == 1 or not jnp.issubdtype(jnp.result_type(inputs), jnp.integer):
        return original(inputs)
    (table,) = at_conversion(
        module.promote_dtype, module.embedding, dtype=module.dtype, inexact=False
    )
    return embed_p.bind(jnp.asarray(inputs), table)


def attend(original, module, query):
    """``nn.Embed.attend``: ``embed_attend`` on ``(query, table)`` (one Gemm, ``transB``)."""
    query, table = linen_promoted(module, (query, module.embedding))
    return attend_p.bind(query, table)


def normalised_weights(original, module, *args, **kwargs):
    """``SpectralNorm``/``WeightNorm.__call__``: Flax's method, stored arrays folded now.

    ``update_stats`` only decides whether ``u`` and ``sigma`` are written back
    (the output is the same): with their collection immutable (an exported
    bound model, the flag a runtime input) there is nothing to write, so the
    flag is dropped rather than traced into an ``If`` whose True branch Flax
    would refuse.
    """
    if kwargs.get("update_stats") is not None and not module.is_mutable_collection(
        getattr(module, "collection_name", "batch_stats")
    ):
        kwargs["update_stats"] = False
    with jax.ensure_compile_time_eval():
        return original(*args, **kwargs)


LINEN = (
    LinenStandIn("Dropout", "__call__", dropout),
    LinenStandIn("Embed", "__call__", embed),
    LinenStandIn("Embed", "attend", attend),
    LinenStandIn("SpectralNorm", "__call__", normalised_weights),
    LinenStandIn("WeightNorm", "__call__", normalised_weights),
)


# -- cases ----------------------------------------------------------------------------


def _with_flag(wrap=None, **kwargs):
    """``fn(x, deterministic)`` calling the bound module (or ``apply``) with that flag."""

    def make(bound):
        if wrap == "apply":
            module, variables = bound.unbind()
            return lambda x, deterministic: module.apply(
                variables, x, deterministic=deterministic, **kwargs
            )
        call = lambda x, d: bound(x, deterministic=d, **kwargs)  # noqa: E731
        if wrap == "vmap":
            return lambda x, deterministic: jax.vmap(lambda r: call(r, deterministic))(x)
        if wrap == "grad":
            loss = lambda x, d: (call(x, d) ** 2 * jnp.cos(x)).sum()  # noqa: E731
            return lambda x, deterministic: jax.grad(loss)(x, deterministic)
        return call

    return make


def _train_apply(bound):
    """Training mode spelled in the call: Flax's own dropout, JAX's random bits."""
    module, variables = bound.unbind()
    rngs = {"dropout": jax.random.key(7)}
    return lambda x: module.apply(variables, x, deterministic=False, rngs=rngs)


def _drop(*, rate=0.5, **kwargs):
    return lambda nn: nn.Dropout(rate, **kwargs)


def _drop_case(name, build, inputs, *, wrap=None, expect=(), flag=True, **kw):
    params = {"deterministic": True} if flag else None
    make = linen_factory(build, (2, 6), wrap=wrap, init_kwargs={"deterministic": True})
    return case(name, make, inputs, factory=True, input_params=params, expect=expect, **kw)


_FLAGGED = "Not -> Dropout -> Where:Bx6"

family.add_cases(
    dropout_p,
    lambda: [
        # the bound module exports in inference: no Dropout at all
        _drop_case("linen_dropout_pinned", _drop(), [("B", 6)], flag=False, counts={"Dropout": 0}),
        _drop_case("linen_dropout_runtime_flag", _drop(), [("B", 6)], expect=[_FLAGGED]),
        _drop_case(
            "linen_dropout_broadcast_dims",
            _drop(broadcast_dims=(-1,)),
            [("B", 3, 4)],
            expect=["Dropout -> Where:Bx3x4"],
        ),
        _drop_case(
            "linen_dropout_apply_lambda",
            _drop(),
            [("B", 6)],
            wrap=_with_flag("apply"),
            expect=[_FLAGGED],
        ),
        _drop_case(
            "linen_dropout_vmap",
            _drop(broadcast_dims=(0,)),
            [("B", 3, 4)],
            wrap=_with_flag("vmap"),
            expect=["Dropout"],
        ),
        _drop_case(
            "linen_dropout_grad", _drop(), [("B", 6)], wrap=_with_flag("grad"), expect=["Dropout"]
        ),
        _drop_case("linen_dropout_rate_one", _drop(rate=1.0), [("B", 6)], counts={"Dropout": 0}),
        # concrete False in the call, nothing pinned: Flax's code, JAX's threefry bits exactly
        _drop_case(
            "linen_dropout_train_apply",
            _drop(rate=0.25),
            [("B", 6)],
            wrap=_train_apply,
            flag=False,
            counts={"Dropout": 0},
        ),
    ],
)


def _embed(nn):
    return nn.Embed(num_embeddings=6, features=4)


def _embed_case(name, inputs, *, wrap=None, **kw):
    # init through attend (a float query): Embed's table is made in setup
    make = linen_factory(_embed, (2, 4), wrap=wrap, init_kwargs={"method": "attend"})
    return case(name, make, inputs, factory=True, **kw)


def _attend(bound):
    return bound.attend


_I32 = [np.int32]
_EDGE = np.array([[0, 5, -1, -6, -7, 6], [100, -100, 3, 2, 1, 0]], np.int32)
_LOOKUP = "Gather -> Where"

family.add_cases(
    embed_p,
    lambda: [
        _embed_case(
            "linen_embed", [("B", 3)], dtypes=_I32, input_range=(0, 6), expect=[f"{_LOOKUP}:Bx3x4"]
        ),
        _embed_case("linen_embed_out_of_range", [_EDGE], expect=[f"{_LOOKUP}:2x6x4"]),
        _embed_case(
            "linen_embed_vmap",
            [("B", 2, 3)],
            wrap=jax.vmap,
            dtypes=_I32,
            input_range=(-8, 8),
            expect=[f"{_LOOKUP}:Bx2x3x4"],
        ),
        _embed_case(
            "linen_embed_apply_lambda",
            [("B", 3)],
            wrap=via_apply,
            dtypes=_I32,
            input_range=(0, 6),
            expect=[f"{_LOOKUP}:Bx3x4"],
        ),
    ],
)

family.add_cases(
    attend_p,
    lambda: [
        _embed_case(
            "linen_attend",
            [("B", 4)],
            wrap=_attend,
            expect=["Gemm:Bx6"],
            counts={"Transpose": 0, "MatMul": 0},
        ),
        _embed_case(
            "linen_attend_3d",
            [("B", 5, 4)],
            wrap=_attend,
            expect=["Reshape -> Gemm -> Reshape:Bx5x6"],
        ),
        _embed_case(
            "linen_attend_vmap", [("B", 4)], wrap=lambda b: jax.vmap(b.attend), expect=["Gemm:Bx6"]
        ),
        # the table stays float32 (param_dtype): Flax casts a float64 query down
        _embed_case(
            "linen_attend_grad",
            [(3, 4)],
            wrap=lambda b: grad_of_squares(b.attend),
            tolerances={"float64": (1e-5, 1e-5)},
        ),
    ],
)


class _Spectral:
    """``SpectralNorm`` around a layer, called with ``update_stats`` (a required keyword)."""

    @staticmethod
    def of(make_layer, **options):
        def build(nn):
            class Spectral(nn.Module):
                @nn.compact
                def __call__(self, x, update_stats: bool = False):
                    layer = nn.SpectralNorm(make_layer(nn), **options)
                    return layer(x, update_stats=update_stats)

            return Spectral()

        return build


def _weight(make_layer, **options):
    return lambda nn: nn.WeightNorm(make_layer(nn), **options)


def _dense(nn):
    return nn.Dense(5)


def _conv(nn):
    return nn.Conv(4, (3, 3))


def _wn_case(name, build, init, inputs, expect=(), **kw):
    # the kernel's normalisation is folded: no arithmetic on weights in the graph
    counts = kw.pop("counts", {"Sqrt": 0, "ReduceSum": 0, "MatMul": 0, "Div": 0})
    make = linen_factory(build, init, wrap=kw.pop("wrap", None))
    return case(name, make, inputs, factory=True, expect=expect, counts=counts, **kw)


def _update_stats(bound):
    """Training spelled in the call: new ``u``/``sigma`` out, from stored arrays only."""
    module, variables = bound.unbind()
    return lambda x: module.apply(variables, x, update_stats=True, mutable=["batch_stats"])


family.add_cases(
    linear_p,
    lambda: [
        _wn_case(
            "linen_spectral_norm_dense", _Spectral.of(_dense), (2, 4), [("B", 4)], ["Gemm:Bx5"]
        ),
        _wn_case(
            # the flag a runtime input of a bound model: nothing to write back, one Gemm
            "linen_spectral_norm_update_stats_input",
            _Spectral.of(_dense),
            (2, 4),
            [("B", 4)],
            ["Gemm:Bx5"],
            input_params={"update_stats": False},
            variants=["f32"],
            no_unused_inputs=False,
        ),
        _wn_case(
            "linen_spectral_norm_steps",
            _Spectral.of(_dense, n_steps=3),
            (2, 4),
            [("B", 4)],
            ["Gemm:Bx5"],
        ),
        _wn_case(
            "linen_spectral_norm_vmap",
            _Spectral.of(_dense),
            (2, 4),
            [("B", 3, 4)],
            ["MatMul -> Add:Bx3x5"],
            wrap=jax.vmap,
            counts={"Sqrt": 0, "Div": 0},
        ),
        _wn_case(
            "linen_spectral_norm_grad",
            _Spectral.of(_dense),
            (2, 4),
            [(3, 4)],
            wrap=grad_of_squares,
            counts={"Sqrt": 0},
        ),
        _wn_case(
            "linen_spectral_norm_update_stats",
            _Spectral.of(_dense),
            (2, 4),
            [("B", 4)],
            ["Gemm:Bx5"],
            wrap=_update_stats,
        ),
        _wn_case("linen_weight_norm_dense", _weight(_dense), (2, 4), [("B", 4)], ["Gemm:Bx5"]),
        _wn_case(
            "linen_weight_norm_all_params",
            _weight(_dense, variable_filter=None),
            (2, 4),
            [("B", 4)],
            ["Gemm:Bx5"],
        ),
        _wn_case(
            "linen_weight_norm_no_scale",
            _weight(_dense, use_scale=False, feature_axes=None),
            (2, 4),
            [("B", 4)],
            ["Gemm:Bx5"],
        ),
        _wn_case(
            "linen_weight_norm_apply_lambda",
            _weight(_dense),
            (2, 4),
            [("B", 4)],
            ["Gemm:Bx5"],
            wrap=via_apply,
        ),
    ],
)

# ONNX Runtime has no float64 Conv: float64 convolutions decompose (conv.py's *_f64 cases)
family.add_cases(
    conv_p,
    lambda: [
        _wn_case(
            "linen_spectral_norm_conv",
            _Spectral.of(_conv),
            (1, 6, 6, 3),
            [("B", 6, 6, 3)],
            ["Conv"],
            variants=["f32"],
        ),
        _wn_case(
            "linen_weight_norm_conv",
            _weight(_conv),
            (1, 6, 6, 3),
            [("B", 6, 6, 3)],
            ["Conv"],
            variants=["f32"],
        ),
    ],
)
