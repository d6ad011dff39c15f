"""Example Flax Linen models, and their cases (small configs, random weights).

- :func:`resnet`: a ResNet with a stride-2 stem, basic blocks, and a stride and channel
  change between stages (projection shortcut: 1x1 ``Conv`` + ``BatchNorm``), global average
  pooling and a ``Dense`` head; ``BatchNorm`` and ``Dropout`` follow a ``train`` flag;
- :func:`encoder`: a transformer encoder (``Embed``, learned positions, post-LN blocks with
  ``SelfAttention``, ``Dropout`` after attention and in the MLP, a padding mask) whose
  dropout follows a ``deterministic`` flag;
- :func:`lstm`: a sequence classifier (``Embed`` -> ``nn.RNN(LSTMCell)`` -> ``Dense`` on the
  last step);
- :func:`lm1b`: a decoder in the style of Flax's lm1b example (and T5X/MaxText): every
  parameter boxed with ``nn.with_logical_partitioning`` (``nn.LogicallyPartitioned``
  variables), activations under ``nn.with_logical_constraint`` (a no-op without a mesh),
  a pre-LN block of causal ``MultiHeadDotProductAttention`` and a ``DenseGeneral`` MLP,
  logits through the shared embedding (``Embed.attend``).

Each builder returns ``(module, variables)`` (initialised with a fixed key, the BatchNorm
statistics moved off their initial values); ``model.bind(variables)`` is what ``to_onnx``
takes. The ResNet and the lm1b decoder are also converted wrapped in
``nnx.bridge.ToNNX``. Importing this module never imports Flax: the classes are defined
on first use (:func:`classes`). The plugin imports this module only when its cases are
built (see ``plugin.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any

import numpy as np

from jax2onnx.plugin import case


@dataclasses.dataclass(frozen=True)
class ResNetConfig:
    image: int = 16
    channels: int = 3
    widths: tuple[int, ...] = (8, 16)  # one stage per width; each later stage halves the size
    blocks: int = 1  # basic blocks per stage
    classes: int = 10
    dropout: float = 0.2
    momentum: float = 0.99  # BatchNorm's

    @classmethod
    def resnet18(cls) -> ResNetConfig:
        """ResNet-18's stages (two basic blocks each) on 224x224x3 images, 1000 classes."""
        return cls(image=224, widths=(64, 128, 256, 512), blocks=2, classes=1000)


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    vocab: int = 50
    max_len: int = 16
    dim: int = 16
    heads: int = 2
    mlp_dim: int = 32
    depth: int = 2
    dropout: float = 0.1

    @classmethod
    def base(cls) -> EncoderConfig:
        """BERT-base's encoder sizes (12 layers, 768 wide, 12 heads) on 128 tokens."""
        return cls(vocab=30522, max_len=128, dim=768, heads=12, mlp_dim=3072, depth=12)


@dataclasses.dataclass(frozen=True)
class LSTMConfig:
    vocab: int = 40
    dim: int = 8
    hidden: int = 12
    classes: int = 3


@dataclasses.dataclass(frozen=True)
class Lm1bConfig:
    vocab: int = 40
    max_len: int = 16
    dim: int = 16
    heads: int = 2
    qkv_dim: int = 16
    mlp_dim: int = 32
    dropout: float = 0.1


@functools.cache
def classes() -> types.SimpleNamespace:
    """Define the model classes (imports Flax); one namespace, built once."""
    import jax.numpy as jnp
    from flax import linen as nn

    class BasicBlock(nn.Module):
        features: int
        strides: int = 1
        momentum: float = 0.99

        @nn.compact
        def __call__(self, x, train: bool = False):
            norm = functools.partial(
                nn.BatchNorm, use_running_average=not train, momentum=self.momentum
            )
            y = nn.Conv(self.features, (3, 3), self.strides, padding=1, use_bias=False)(x)
            y = nn.relu(norm()(y))
            y = nn.Conv(self.features, (3, 3), padding=1, use_bias=False)(y)
            y = norm()(y)
            if x.shape[-1] != self.features or self.strides != 1:
                x = nn.Conv(self.features, (1, 1), self.strides, use_bias=False)(x)
                x = norm()(x)
            return nn.relu(x + y)

    class ResNet(nn.Module):
        config: ResNetConfig

        @nn.compact
        def __call__(self, x, train: bool = False):
            c = self.config
            x = nn.Conv(c.widths[0], (3, 3), 2, padding=1, use_bias=False)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=c.momentum)(x)
            x = nn.relu(x)
            for stage, width in enumerate(c.widths):
                for block in range(c.blocks):
                    strides = 2 if stage > 0 and block == 0 else 1
                    x = BasicBlock(width, strides, c.momentum)(x, train)
            x = jnp.mean(x, axis=(1, 2))
            x = nn.Dropout(c.dropout, deterministic=not train)(x)
            return nn.Dense(c.classes)(x)

    class EncoderBlock(nn.Module):
        config: EncoderConfig

        @nn.compact
        def __call__(self, x, mask, deterministic: bool = True):
            c = self.config
            y = nn.SelfAttention(c.heads, dropout_rate=c.dropout)(x, mask, deterministic)
            x = nn.LayerNorm()(x + nn.Dropout(c.dropout)(y, deterministic))
            y = nn.Dense(c.dim)(nn.gelu(nn.Dense(c.mlp_dim)(x)))
            return nn.LayerNorm()(x + nn.Dropout(c.dropout)(y, deterministic))

    class Encoder(nn.Module):
        config: EncoderConfig

        @nn.compact
        def __call__(self, tokens, deterministic: bool = True):
            c = self.config
            positions = self.param("positions", nn.initializers.normal(0.02), (c.max_len, c.dim))
            x = nn.Embed(c.vocab, c.dim)(tokens) + positions[: tokens.shape[-1]]
            mask = nn.make_attention_mask(tokens > 0, tokens > 0)
            for _ in range(c.depth):
                x = EncoderBlock(c)(x, mask, deterministic)
            return x

    class LSTMClassifier(nn.Module):
        config: LSTMConfig

        @nn.compact
        def __call__(self, tokens):
            c = self.config
            x = nn.Embed(c.vocab, c.dim)(tokens)
            x = nn.RNN(nn.LSTMCell(c.hidden))(x)
            return nn.Dense(c.classes)(x[:, -1])

    def logical(init, *names):
        return nn.with_logical_partitioning(init, names)

    dense_init = logical(nn.initializers.xavier_uniform(), "embed", "mlp")
    bias_init = logical(nn.initializers.normal(0.02), "mlp")  # lm1b's are ~0: these are not

    def norm():
        ones, small = nn.initializers.ones, nn.initializers.normal(0.02)
        return nn.LayerNorm(scale_init=logical(ones, "embed"), bias_init=logical(small, "embed"))

    class Lm1bMlp(nn.Module):
        config: Lm1bConfig

        @nn.compact
        def __call__(self, x, deterministic: bool = True):
            c = self.config
            y = nn.DenseGeneral(c.mlp_dim, kernel_init=dense_init, bias_init=bias_init)(x)
            y = nn.Dropout(c.dropout)(nn.relu(y), deterministic)
            y = nn.DenseGeneral(x.shape[-1], kernel_init=dense_init, bias_init=bias_init)(y)
            return nn.Dropout(c.dropout)(y, deterministic)

    class Lm1bBlock(nn.Module):
        config: Lm1bConfig

        @nn.compact
        def __call__(self, x, mask, deterministic: bool = True):
            c = self.config
            x = nn.with_logical_constraint(x, ("activation_batch", "activation_length", "embed"))
            y = nn.MultiHeadDotProductAttention(
                c.heads,
                qkv_features=c.qkv_dim,
                kernel_init=logical(nn.initializers.xavier_uniform(), "embed", "kv"),
                bias_init=logical(nn.initializers.normal(0.02), "embed"),
                broadcast_dropout=False,
                dropout_rate=c.dropout,
            )(norm()(x), mask=mask, deterministic=deterministic)
            x = x + nn.Dropout(c.dropout)(y, deterministic)
            return x + Lm1bMlp(c)(norm()(x), deterministic)

    class Lm1bDecoder(nn.Module):
        config: Lm1bConfig

        @nn.compact
        def __call__(self, tokens, deterministic: bool = True):
            c = self.config
            embed = nn.Embed(
                c.vocab,
                c.dim,
                embedding_init=logical(nn.initializers.normal(1.0), "vocab", "embed"),
            )
            positions = self.param(
                "positions",
                logical(nn.initializers.normal(0.02), "length", "embed"),
                (c.max_len, c.dim),
            )
            x = embed(tokens) + positions[: tokens.shape[-1]]
            mask = nn.combine_masks(
                nn.make_attention_mask(tokens > 0, tokens > 0), nn.make_causal_mask(tokens)
            )
            x = Lm1bBlock(c)(x, mask, deterministic)
            return embed.attend(norm()(x)) / jnp.sqrt(x.shape[-1])

    return types.SimpleNamespace(
        Lm1bDecoder=Lm1bDecoder,
        BasicBlock=BasicBlock,
        ResNet=ResNet,
        EncoderBlock=EncoderBlock,
        Encoder=Encoder,
        LSTMClassifier=LSTMClassifier,
    )


def _initialised(module: Any, *samples: Any, **kwargs: Any) -> tuple[Any, Any]:
    import jax

    from jax2onnx_flax._util import perturbed

    variables = module.init(jax.random.key(0), *samples, **kwargs)
    return module, perturbed(variables)


def resnet(config: ResNetConfig = ResNetConfig()) -> tuple[Any, Any]:
    """The ResNet, its BatchNorm statistics those of one random batch (as after training:
    activations stay of unit scale through the depth, instead of growing layer by layer)."""
    import jax

    module, variables = _initialised(
        classes().ResNet(config), np.ones((1, config.image, config.image, config.channels))
    )
    shape = (4, config.image, config.image, config.channels)
    batch = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    calibrating = classes().ResNet(dataclasses.replace(config, momentum=0.0))
    _, stats = calibrating.apply(
        variables,
        batch,
        train=True,
        mutable=["batch_stats"],
        rngs={"dropout": jax.random.key(4)},
    )
    return module, {**variables, **stats}


def encoder(config: EncoderConfig = EncoderConfig()) -> tuple[Any, Any]:
    import jax.numpy as jnp

    return _initialised(classes().Encoder(config), jnp.ones((1, config.max_len), jnp.int32))


def lstm(config: LSTMConfig = LSTMConfig()) -> tuple[Any, Any]:
    import jax.numpy as jnp

    return _initialised(classes().LSTMClassifier(config), jnp.ones((1, 5), jnp.int32))


def lm1b(config: Lm1bConfig = Lm1bConfig()) -> tuple[Any, Any]:
    """The lm1b-style decoder; its ``params`` hold ``nn.LogicallyPartitioned`` boxes."""
    import jax.numpy as jnp

    return _initialised(classes().Lm1bDecoder(config), jnp.ones((1, config.max_len), jnp.int32))


# -- cases ------------------------------------------------------------------------------


def _bound(build):
    def make():
        module, variables = build()
        return module.bind(variables)

    return make


def _bridged():
    from flax import nnx

    module, variables = resnet()
    bridged = nnx.bridge.ToNNX(module, rngs=nnx.Rngs(0))
    nnx.bridge.lazy_init(bridged, np.ones((1, 16, 16, 3), np.float32))
    nnx.update(bridged, nnx.bridge.variables.linen_vars_to_nnx_attrs(variables))
    return bridged


def _lm1b_bridged():
    """The lm1b decoder in ``nnx.bridge.ToNNX``, its trained (boxed) weights loaded.

    NNX shards a variable made from a box eagerly, which needs a mesh; a model
    built off one (as here) turns that off while its variables are made.
    """
    from flax import nnx

    module, variables = lm1b()
    bridged = nnx.bridge.ToNNX(module, rngs=nnx.Rngs(0))
    with nnx.use_eager_sharding(False):
        nnx.bridge.lazy_init(bridged, np.ones((1, Lm1bConfig().max_len), np.int32))
        nnx.update(bridged, nnx.bridge.variables.linen_vars_to_nnx_attrs(variables))
    return bridged


_IMAGES = [("B", 16, 16, 3)]
# Properties that hold in every variant (f32, f64, symbolic batch): float64 Conv has no
# ONNX Runtime kernel and inlines JAX's computation, so Conv counts are not among them.
_NO_RANDOM = {"Dropout": 0, "RandomUniform": 0, "RandomUniformLike": 0, "Bernoulli": 0}
_RESNET_OPS = {"Gemm": 1, "Relu": 5, **_NO_RANDOM}
_TOKENS = {"dtypes": [np.int32], "variants": ["f32", "f64"]}
_LM1B_OPS = {"Attention": 1, "LayerNormalization": 3, "Gather": 1, **_NO_RANDOM}


def cases() -> list:
    """The cases of every example model, filed under ``"linen_models"``."""
    return [
        case(
            "linen_resnet",
            _bound(resnet),
            _IMAGES,
            factory=True,
            expect=["Add -> Relu"],
            counts=_RESNET_OPS,
        ),
        case(
            "linen_resnet_train_flag",
            _bound(resnet),
            _IMAGES,
            input_params={"train": False},
            factory=True,
            variants=["f32"],
            counts={"If": 1},
        ),
        case("linen_resnet_to_nnx", _bridged, _IMAGES, factory=True, counts=_RESNET_OPS),
        case(
            "linen_encoder",
            _bound(encoder),
            [("B", 8)],
            input_range=(0, EncoderConfig().vocab),
            factory=True,
            counts={"Attention": 2, "LayerNormalization": 4, **_NO_RANDOM},
            **_TOKENS,
        ),
        case(
            "linen_encoder_dropout_flag",
            _bound(encoder),
            [("B", 8)],
            input_range=(0, EncoderConfig().vocab),
            input_params={"deterministic": True},
            factory=True,
            dtypes=[np.int32],
            variants=["f32"],
        ),
        case(
            "linen_lm1b_block",
            _bound(lm1b),
            [("B", 8)],
            input_range=(0, Lm1bConfig().vocab),
            factory=True,
            counts=_LM1B_OPS,
            **_TOKENS,
        ),
        case(
            "linen_lm1b_block_to_nnx",
            _lm1b_bridged,
            [("B", 8)],
            input_range=(0, Lm1bConfig().vocab),
            factory=True,
            counts=_LM1B_OPS,
            **_TOKENS,
        ),
        case(
            "linen_lstm",
            _bound(lstm),
            [("B", 5)],
            input_range=(0, LSTMConfig().vocab),
            factory=True,
            counts={"Loop": 1, **_NO_RANDOM},
            **_TOKENS,
        ),
    ]
