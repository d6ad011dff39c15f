"""Example Equinox models: the test suite's small configs, the benchmark's full sizes.

Six models exercise the layer interceptions together, as a user's model does. Each
takes ONE example, as Equinox layers do; a batch is a ``jax.vmap`` (or
``eqx.filter_vmap``) around the model:

- :func:`mlp`: ``Linear -> gelu -> Dropout -> Linear -> LayerNorm`` on a vector;
- :func:`cnn`: an MNIST-style CNN on a ``(channels, height, width)`` image
  (``Conv2d -> relu -> MaxPool2d -> Conv2d -> BatchNorm -> relu -> AvgPool2d ->
  flatten -> Linear``); stateful: built by :func:`cnn` with its ``eqx.nn.State``,
  called as ``model(image, state)`` under a vmap named ``"batch"`` (:func:`batched`);
- :func:`vit`: a ViT/DINOv2-style encoder (patch ``Conv2d``, class token, learned
  positions, pre-LN blocks with ``eqx.nn.MultiheadAttention`` and LayerScale, final
  ``LayerNorm``, the class token's features through an optional ``Linear`` head);
- :func:`gpt`: a GPT-style decoder on ``int32`` tokens (``Embedding``, causal
  self-attention with rotary positions on ``q``/``k``: a fused projection and
  ``jax.nn.dot_product_attention``, or ``MultiheadAttention(process_heads=...)``;
  ``RMSNorm``, residual ``Dropout``, tied or separate head);
- :func:`moe`: a mixture-of-experts block on a token sequence (router ``Linear``,
  ``jax.lax.top_k`` and softmax gates over an ``eqx.filter_vmap``-stacked ensemble of
  expert MLPs, dense dispatch);
- :func:`neural_ode`: ``diffrax.diffeqsolve`` (Tsit5, fixed ``max_steps``,
  ``SaveAt(ts=...)``) of a vector field that is an ``eqx.nn.MLP``, as a function of
  the initial value ``y0`` (diffrax is imported when the model is called).

The configs are plain dataclasses; their classmethods give full-size models
(``ViTConfig.dinov2_small()``, ``GPTConfig.gpt2_small()`` ...). Importing this module
never imports Equinox: the classes are defined on first use (:func:`classes`, or
``models.ViT`` through the module ``__getattr__``).
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    in_features: int = 16
    hidden: int = 32
    out_features: int = 8
    dropout: float = 0.1
    layer_norm: bool = True

    @classmethod
    def wide(cls) -> MLPConfig:
        return cls(in_features=784, hidden=4096, out_features=1000)


@dataclasses.dataclass(frozen=True)
class CNNConfig:
    """MNIST-style: ``channels x image x image`` in, ``classes`` logits out."""

    image: int = 12
    channels: int = 1
    features: tuple[int, int] = (4, 8)
    classes: int = 10

    @classmethod
    def mnist(cls) -> CNNConfig:
        return cls(image=28, features=(32, 64))

    @property
    def flat(self) -> int:
        """Features after two 2x2 pools (the convolutions keep the size)."""
        return (self.image // 4) ** 2 * self.features[1]


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    image: int = 16
    channels: int = 3
    patch: int = 4
    dim: int = 32
    depth: int = 2
    heads: int = 4
    mlp_dim: int = 64
    classes: int | None = 10  # None: the class token's features are the output (DINO)
    dropout: float = 0.1
    layer_scale: float = 0.5  # LayerScale's initial value (DINOv2 uses 1e-5)

    @classmethod
    def base16(cls) -> ViTConfig:
        """ViT-B/16 on 3x224x224 images."""
        return cls(image=224, patch=16, dim=768, depth=12, heads=12, mlp_dim=3072, classes=1000)

    @classmethod
    def dinov2_small(cls) -> ViTConfig:
        """DINOv2 ViT-S/14 on 3x224x224 images, class-token features out."""
        return cls(
            image=224,
            patch=14,
            dim=384,
            depth=12,
            heads=6,
            mlp_dim=1536,
            classes=None,
            dropout=0.0,
            layer_scale=1e-5,
        )

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2 + 1


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    dim: int = 32
    depth: int = 2
    heads: int = 4
    mlp_dim: int = 128
    dropout: float = 0.1
    tied: bool = True  # the output head is the token embedding's table
    fused: bool = True  # own attention code; False: eqx.nn.MultiheadAttention

    @classmethod
    def gpt2_small(cls) -> GPTConfig:
        """GPT-2 small's sizes (124M parameters); the benchmark runs it on 128 tokens."""
        return cls(vocab=50257, dim=768, depth=12, heads=12, mlp_dim=3072)


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    dim: int = 16
    hidden: int = 32
    experts: int = 4
    top_k: int = 2

    @classmethod
    def mixtral_like(cls) -> MoEConfig:
        """One Mixtral-8x7B-shaped layer's routing (8 experts, top 2) at a smaller width."""
        return cls(dim=1024, hidden=3584, experts=8, top_k=2)


@dataclasses.dataclass(frozen=True)
class NeuralODEConfig:
    size: int = 4
    width: int = 16
    depth: int = 2
    t1: float = 1.0
    dt0: float = 0.1
    saves: int = 5  # SaveAt(ts=linspace(0, t1, saves))
    max_steps: int = 16
    adaptive: bool = False  # PIDController instead of ConstantStepSize

    @classmethod
    def large(cls) -> NeuralODEConfig:
        return cls(size=64, width=256, depth=3, dt0=0.01, saves=11, max_steps=128)


def mlp(config: MLPConfig = MLPConfig(), seed: int = 0) -> Any:
    return classes().MLP(config, key=_key(seed))


def cnn(config: CNNConfig = CNNConfig(), seed: int = 0) -> tuple[Any, Any]:
    """``(model, state)``: the CNN's BatchNorm keeps its statistics in an ``eqx.nn.State``."""
    import equinox as eqx

    return eqx.nn.make_with_state(classes().CNN)(config, key=_key(seed))


def vit(config: ViTConfig = ViTConfig(), seed: int = 0) -> Any:
    return classes().ViT(config, key=_key(seed))


def gpt(config: GPTConfig = GPTConfig(), seed: int = 0) -> Any:
    return classes().GPT(config, key=_key(seed))


def moe(config: MoEConfig = MoEConfig(), seed: int = 0) -> Any:
    return classes().MoEBlock(config, key=_key(seed))


def neural_ode(config: NeuralODEConfig = NeuralODEConfig(), seed: int = 0) -> Any:
    return classes().NeuralODE(config, key=_key(seed))


def batched(model: Any) -> Any:
    """A stateful model over a batch: ``eqx.filter_vmap`` with the ``"batch"`` axis name.

    ``batched(model)(images, state)`` maps over the images and shares the state, as
    ``eqx.nn.BatchNorm(axis_name="batch")`` expects; the wrapper is an ``eqx.Module``,
    so ``to_onnx((batched(model), state), ...)`` exports it.
    """
    import equinox as eqx

    return eqx.filter_vmap(model, in_axes=(0, None), out_axes=(0, None), axis_name="batch")


def _key(seed: int) -> Any:
    import jax

    return jax.random.PRNGKey(seed)


def __getattr__(name: str) -> Any:
    """``models.ViT`` and the other classes, defined (importing Equinox) on first access."""
    if name[:1].isupper() and not name.endswith("Config"):
        found = getattr(classes(), name, None)
        if found is not None:
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def classes() -> types.SimpleNamespace:
    """Define the model classes (imports Equinox); one namespace, built once."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    class MLP(eqx.Module):
        linear1: eqx.nn.Linear
        dropout: eqx.nn.Dropout
        linear2: eqx.nn.Linear
        norm: eqx.nn.LayerNorm | None

        def __init__(self, config: MLPConfig, *, key):
            k1, k2 = jax.random.split(key)
            self.linear1 = eqx.nn.Linear(config.in_features, config.hidden, key=k1)
            self.dropout = eqx.nn.Dropout(config.dropout)
            self.linear2 = eqx.nn.Linear(config.hidden, config.out_features, key=k2)
            self.norm = eqx.nn.LayerNorm(config.out_features) if config.layer_norm else None

        def __call__(self, x, *, key=None):
            x = self.dropout(jax.nn.gelu(self.linear1(x)), key=key)
            x = self.linear2(x)
            return x if self.norm is None else self.norm(x)

    class CNN(eqx.Module):
        conv1: eqx.nn.Conv2d
        pool1: eqx.nn.MaxPool2d
        conv2: eqx.nn.Conv2d
        norm: eqx.nn.BatchNorm
        pool2: eqx.nn.AvgPool2d
        linear: eqx.nn.Linear

        def __init__(self, config: CNNConfig, *, key):
            k1, k2, k3 = jax.random.split(key, 3)
            f1, f2 = config.features
            self.conv1 = eqx.nn.Conv2d(config.channels, f1, 3, padding=1, key=k1)
            self.pool1 = eqx.nn.MaxPool2d(2, stride=2)
            self.conv2 = eqx.nn.Conv2d(f1, f2, 3, padding=1, key=k2)
            self.norm = eqx.nn.BatchNorm(f2, axis_name="batch", mode="ema")
            self.pool2 = eqx.nn.AvgPool2d(2, stride=2)
            self.linear = eqx.nn.Linear(config.flat, config.classes, key=k3)

        def __call__(self, x, state):
            x = self.pool1(jax.nn.relu(self.conv1(x)))
            x, state = self.norm(self.conv2(x), state)
            x = self.pool2(jax.nn.relu(x))
            return self.linear(x.reshape(-1)), state

    class FeedForward(eqx.Module):
        """``Linear -> gelu -> Linear`` on one token."""

        fc: eqx.nn.Linear
        proj: eqx.nn.Linear

        def __init__(self, dim: int, hidden: int, *, key):
            k1, k2 = jax.random.split(key)
            self.fc = eqx.nn.Linear(dim, hidden, key=k1)
            self.proj = eqx.nn.Linear(hidden, dim, key=k2)

        def __call__(self, x):
            return self.proj(jax.nn.gelu(self.fc(x)))

    class EncoderBlock(eqx.Module):
        """Pre-LN with LayerScale: ``x + g1 * attn(ln(x))``, ``x + g2 * mlp(ln(x))``."""

        norm1: eqx.nn.LayerNorm
        attn: eqx.nn.MultiheadAttention
        scale1: jax.Array
        norm2: eqx.nn.LayerNorm
        mlp: FeedForward
        scale2: jax.Array

        def __init__(self, config: ViTConfig, *, key):
            k1, k2 = jax.random.split(key)
            d = config.dim
            self.norm1 = eqx.nn.LayerNorm(d)
            self.attn = eqx.nn.MultiheadAttention(
                config.heads,
                d,
                use_query_bias=True,
                use_key_bias=True,
                use_value_bias=True,
                use_output_bias=True,
                dropout_p=config.dropout,
                key=k1,
            )
            self.scale1 = jnp.full((d,), config.layer_scale, jnp.float32)
            self.norm2 = eqx.nn.LayerNorm(d)
            self.mlp = FeedForward(d, config.mlp_dim, key=k2)
            self.scale2 = jnp.full((d,), config.layer_scale, jnp.float32)

        def __call__(self, x):  # (tokens, dim)
            y = jax.vmap(self.norm1)(x)
            x = x + self.scale1 * self.attn(y, y, y)
            y = jax.vmap(self.norm2)(x)
            return x + self.scale2 * jax.vmap(self.mlp)(y)

    class ViT(eqx.Module):
        patch_embed: eqx.nn.Conv2d
        cls_token: jax.Array
        pos_embed: jax.Array
        blocks: tuple[EncoderBlock, ...]
        norm: eqx.nn.LayerNorm
        head: eqx.nn.Linear | None

        def __init__(self, config: ViTConfig, *, key):
            keys = jax.random.split(key, config.depth + 4)
            p, d = config.patch, config.dim
            self.patch_embed = eqx.nn.Conv2d(config.channels, d, p, stride=p, key=keys[0])
            self.cls_token = 0.02 * jax.random.normal(keys[1], (1, d))
            self.pos_embed = 0.02 * jax.random.normal(keys[2], (config.tokens, d))
            self.blocks = tuple(EncoderBlock(config, key=k) for k in keys[4:])
            self.norm = eqx.nn.LayerNorm(d)
            self.head = (
                None if config.classes is None else eqx.nn.Linear(d, config.classes, key=keys[3])
            )

        def __call__(self, image):  # (channels, height, width)
            x = self.patch_embed(image)  # (dim, h, w)
            x = x.reshape(x.shape[0], -1).T  # (h * w, dim)
            x = jnp.concatenate([self.cls_token, x], axis=0) + self.pos_embed
            for block in self.blocks:
                x = block(x)
            features = self.norm(x[0])
            return features if self.head is None else self.head(features)

    class CausalSelfAttention(eqx.Module):
        """Causal self-attention with rotary positions on ``q`` and ``k``.

        ``config.fused``: fused ``q/k/v`` projection and ``jax.nn.dot_product_attention``
        (``is_causal=True``); otherwise ``eqx.nn.MultiheadAttention`` with a causal mask
        and the rotation in ``process_heads`` (the pattern of Equinox's documentation).
        """

        qkv: eqx.nn.Linear | None
        proj: eqx.nn.Linear | None
        mha: eqx.nn.MultiheadAttention | None
        rope: eqx.nn.RotaryPositionalEmbedding
        heads: int = eqx.field(static=True)

        def __init__(self, config: GPTConfig, *, key):
            k1, k2 = jax.random.split(key)
            d = config.dim
            self.heads = config.heads
            self.rope = eqx.nn.RotaryPositionalEmbedding(d // config.heads)
            if config.fused:
                self.qkv = eqx.nn.Linear(d, 3 * d, key=k1)
                self.proj = eqx.nn.Linear(d, d, key=k2)
                self.mha = None
            else:
                self.qkv = self.proj = None
                self.mha = eqx.nn.MultiheadAttention(config.heads, d, key=k1)

        def __call__(self, x):  # (tokens, dim)
            rotate = jax.vmap(self.rope, in_axes=1, out_axes=1)  # over the heads
            if self.mha is not None:
                causal = jnp.tril(jnp.ones((x.shape[0], x.shape[0]), dtype=bool))
                rotated = lambda q, k, v: (rotate(q), rotate(k), v)  # noqa: E731
                return self.mha(x, x, x, mask=causal, process_heads=rotated)
            heads = (x.shape[0], self.heads, x.shape[1] // self.heads)
            q, k, v = (a.reshape(heads) for a in jnp.split(jax.vmap(self.qkv)(x), 3, axis=-1))
            y = jax.nn.dot_product_attention(rotate(q), rotate(k), v, is_causal=True)
            return jax.vmap(self.proj)(y.reshape(x.shape))

    class DecoderBlock(eqx.Module):
        norm1: eqx.nn.RMSNorm
        attn: CausalSelfAttention
        norm2: eqx.nn.RMSNorm
        mlp: FeedForward
        dropout: eqx.nn.Dropout

        def __init__(self, config: GPTConfig, *, key):
            k1, k2 = jax.random.split(key)
            self.norm1 = eqx.nn.RMSNorm(config.dim)
            self.attn = CausalSelfAttention(config, key=k1)
            self.norm2 = eqx.nn.RMSNorm(config.dim)
            self.mlp = FeedForward(config.dim, config.mlp_dim, key=k2)
            self.dropout = eqx.nn.Dropout(config.dropout)

        def __call__(self, x, *, key=None):
            k1, k2 = (None, None) if key is None else jax.random.split(key)
            x = x + self.dropout(self.attn(jax.vmap(self.norm1)(x)), key=k1)
            return x + self.dropout(jax.vmap(self.mlp)(jax.vmap(self.norm2)(x)), key=k2)

    class GPT(eqx.Module):
        embed: eqx.nn.Embedding
        blocks: tuple[DecoderBlock, ...]
        norm: eqx.nn.RMSNorm
        head: eqx.nn.Linear | None

        def __init__(self, config: GPTConfig, *, key):
            keys = jax.random.split(key, config.depth + 2)
            self.embed = eqx.nn.Embedding(config.vocab, config.dim, key=keys[0])
            self.blocks = tuple(DecoderBlock(config, key=k) for k in keys[2:])
            self.norm = eqx.nn.RMSNorm(config.dim)
            self.head = (
                None
                if config.tied
                else eqx.nn.Linear(config.dim, config.vocab, use_bias=False, key=keys[1])
            )

        def __call__(self, ids, *, key=None):  # (tokens,) int
            keys = (
                [None] * len(self.blocks)
                if key is None
                else jax.random.split(key, len(self.blocks))
            )
            x = jax.vmap(self.embed)(ids)
            for block, k in zip(self.blocks, keys, strict=True):
                x = block(x, key=k)
            x = jax.vmap(self.norm)(x)
            if self.head is None:
                return x @ self.embed.weight.T
            return jax.vmap(self.head)(x)

    class MoE(eqx.Module):
        """Top-k routing of one token over an ensemble of experts (dense dispatch).

        Every expert runs on the token (one batched MLP over the stacked weights); the
        ``top_k`` best outputs are gathered and mixed with the softmax of their router
        logits.
        """

        router: eqx.nn.Linear
        experts: FeedForward  # every array has a leading axis of `experts`
        top_k: int = eqx.field(static=True)

        def __init__(self, config: MoEConfig, *, key):
            k1, k2 = jax.random.split(key)
            self.router = eqx.nn.Linear(config.dim, config.experts, key=k1)

            @eqx.filter_vmap
            def make_expert(k):
                return FeedForward(config.dim, config.hidden, key=k)

            self.experts = make_expert(jax.random.split(k2, config.experts))
            self.top_k = config.top_k

        def __call__(self, x):  # (dim,)
            logits, chosen = jax.lax.top_k(self.router(x), self.top_k)
            gates = jax.nn.softmax(logits)

            @eqx.filter_vmap(in_axes=(eqx.if_array(0), None))
            def run(expert, x):
                return expert(x)

            outputs = run(self.experts, x)  # (experts, dim)
            return jnp.einsum("k,kd->d", gates, outputs[chosen])

    class MoEBlock(eqx.Module):
        """``x + moe(layer_norm(x))`` on a ``(tokens, dim)`` sequence."""

        norm: eqx.nn.LayerNorm
        moe: MoE

        def __init__(self, config: MoEConfig, *, key):
            self.norm = eqx.nn.LayerNorm(config.dim)
            self.moe = MoE(config, key=key)

        def __call__(self, x):
            return x + jax.vmap(lambda t: self.moe(self.norm(t)))(x)

    class NeuralODE(eqx.Module):
        """``y(ts)`` of ``dy/dt = mlp(y)`` from ``y(0) = y0`` (diffrax, Tsit5)."""

        field: eqx.nn.MLP
        config: NeuralODEConfig = eqx.field(static=True)

        def __init__(self, config: NeuralODEConfig, *, key):
            self.field = eqx.nn.MLP(
                config.size, config.size, config.width, config.depth, activation=jnp.tanh, key=key
            )
            self.config = config

        def __call__(self, y0):  # (size,)
            import diffrax

            c = self.config
            controller = (
                diffrax.PIDController(rtol=1e-4, atol=1e-6)
                if c.adaptive
                else diffrax.ConstantStepSize()
            )
            solution = diffrax.diffeqsolve(
                diffrax.ODETerm(lambda t, y, args: self.field(y)),
                diffrax.Tsit5(),
                t0=0.0,
                t1=c.t1,
                dt0=c.dt0,
                y0=y0,
                saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, c.t1, c.saves)),
                stepsize_controller=controller,
                max_steps=c.max_steps,
            )
            return solution.ys  # (saves, size)

    return types.SimpleNamespace(
        MLP=MLP,
        CNN=CNN,
        FeedForward=FeedForward,
        EncoderBlock=EncoderBlock,
        ViT=ViT,
        CausalSelfAttention=CausalSelfAttention,
        DecoderBlock=DecoderBlock,
        GPT=GPT,
        MoE=MoE,
        MoEBlock=MoEBlock,
        NeuralODE=NeuralODE,
    )
