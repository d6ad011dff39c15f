"""Example Flax NNX models: the test suite's small configs, the benchmark's full sizes.

Five models exercise the module interceptions together, as a user's model does:

- :func:`mlp`: the README MLP (``Linear -> BatchNorm -> Dropout -> gelu -> Linear``);
- :func:`cnn`: an MNIST-style CNN (two ``Conv -> relu -> avg_pool`` stages, two ``Linear``);
- :func:`vit`: a Vision Transformer (patch ``Conv``, class token, learned positions,
  pre-LN blocks with ``nnx.MultiHeadAttention``);
- :func:`gpt2`: a GPT-2-style decoder (causal ``jax.nn.dot_product_attention`` on a
  fused ``q/k/v`` projection, tied output projection through ``Embed.attend``);
- :func:`encoder_decoder`: one encoder block and one decoder block (causal
  self-attention and cross-attention through ``nnx.MultiHeadAttention`` masks).

The configs are plain dataclasses (``ViTConfig.base16()`` and ``GPTConfig.gpt2_small()``
are the full-size models). Importing this module never imports Flax: the classes are
defined on first use (:func:`classes`, or ``models.ViT`` through the module ``__getattr__``).
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    in_features: int = 30
    hidden: int = 20
    out_features: int = 10
    dropout: float = 0.1


@dataclasses.dataclass(frozen=True)
class CNNConfig:
    """MNIST-style: ``image x image x channels`` in, ``classes`` logits out."""

    image: int = 28
    channels: int = 1
    features: tuple[int, int] = (8, 16)
    hidden: int = 32
    classes: int = 10

    @classmethod
    def mnist(cls) -> CNNConfig:
        return cls(features=(32, 64), hidden=256)


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    image: int = 32
    channels: int = 3
    patch: int = 8
    dim: int = 32
    depth: int = 2
    heads: int = 4
    mlp_dim: int = 64
    classes: int = 10
    dropout: float = 0.1

    @classmethod
    def base16(cls) -> ViTConfig:
        """ViT-B/16 on 224x224x3 images."""
        return cls(image=224, patch=16, dim=768, depth=12, heads=12, mlp_dim=3072, classes=1000)

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2 + 1


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    max_len: int = 16
    dim: int = 32
    depth: int = 2
    heads: int = 4
    dropout: float = 0.1

    @classmethod
    def gpt2_small(cls) -> GPTConfig:
        """GPT-2 small (124M parameters); the benchmark runs it on 128 tokens."""
        return cls(vocab=50257, max_len=1024, dim=768, depth=12, heads=12)


@dataclasses.dataclass(frozen=True)
class EncoderDecoderConfig:
    dim: int = 32
    heads: int = 4
    mlp_dim: int = 64
    dropout: float = 0.1


def mlp(config: MLPConfig = MLPConfig(), seed: int = 0) -> Any:
    from flax import nnx

    return classes().MLP(config, rngs=nnx.Rngs(seed))


def cnn(config: CNNConfig = CNNConfig(), seed: int = 0) -> Any:
    from flax import nnx

    return classes().CNN(config, rngs=nnx.Rngs(seed))


def vit(config: ViTConfig = ViTConfig(), seed: int = 0) -> Any:
    from flax import nnx

    return classes().ViT(config, rngs=nnx.Rngs(seed))


def gpt2(config: GPTConfig = GPTConfig(), seed: int = 0) -> Any:
    from flax import nnx

    return classes().GPT2(config, rngs=nnx.Rngs(seed))


def encoder_decoder(config: EncoderDecoderConfig = EncoderDecoderConfig(), seed: int = 0) -> Any:
    from flax import nnx

    return classes().EncoderDecoderBlock(config, rngs=nnx.Rngs(seed))


def __getattr__(name: str) -> Any:
    """``models.ViT`` and the other classes, defined (importing Flax) on first access."""
    if name[:1].isupper() and not name.endswith("Config"):
        found = getattr(classes(), name, None)
        if found is not None:
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def classes() -> types.SimpleNamespace:
    """Define the model classes (imports Flax); one namespace, built once."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    def normal(rngs: nnx.Rngs, shape: tuple[int, ...]) -> nnx.Param:
        return nnx.Param(0.02 * jax.random.normal(rngs.params(), shape, jnp.float32))

    class MLP(nnx.Module):
        def __init__(self, config: MLPConfig, *, rngs: nnx.Rngs):
            self.linear1 = nnx.Linear(config.in_features, config.hidden, rngs=rngs)
            self.bn = nnx.BatchNorm(config.hidden, rngs=rngs)
            self.dropout = nnx.Dropout(config.dropout, rngs=rngs)
            self.linear2 = nnx.Linear(config.hidden, config.out_features, rngs=rngs)

        def __call__(self, x):
            x = nnx.gelu(self.dropout(self.bn(self.linear1(x))))
            return self.linear2(x)

    class CNN(nnx.Module):
        def __init__(self, config: CNNConfig, *, rngs: nnx.Rngs):
            f1, f2 = config.features
            self.conv1 = nnx.Conv(config.channels, f1, kernel_size=(3, 3), rngs=rngs)
            self.conv2 = nnx.Conv(f1, f2, kernel_size=(3, 3), rngs=rngs)
            flat = (config.image // 4) ** 2 * f2
            self.linear1 = nnx.Linear(flat, config.hidden, rngs=rngs)
            self.linear2 = nnx.Linear(config.hidden, config.classes, rngs=rngs)

        def __call__(self, x):
            x = nnx.avg_pool(nnx.relu(self.conv1(x)), window_shape=(2, 2), strides=(2, 2))
            x = nnx.avg_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
            x = x.reshape(x.shape[0], -1)
            return self.linear2(nnx.relu(self.linear1(x)))

    class MLPBlock(nnx.Module):
        def __init__(self, dim: int, hidden: int, dropout: float, *, rngs: nnx.Rngs):
            self.fc = nnx.Linear(dim, hidden, rngs=rngs)
            self.proj = nnx.Linear(hidden, dim, rngs=rngs)
            self.dropout = nnx.Dropout(dropout, rngs=rngs)

        def __call__(self, x):
            return self.dropout(self.proj(nnx.gelu(self.fc(x))))

    class EncoderBlock(nnx.Module):
        """Pre-LN: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

        def __init__(self, dim: int, heads: int, mlp_dim: int, dropout: float, *, rngs):
            self.ln1 = nnx.LayerNorm(dim, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(
                heads, dim, dropout_rate=dropout, decode=False, rngs=rngs
            )
            self.ln2 = nnx.LayerNorm(dim, rngs=rngs)
            self.mlp = MLPBlock(dim, mlp_dim, dropout, rngs=rngs)

        def __call__(self, x, mask=None):
            x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.mlp(self.ln2(x))

    class ViT(nnx.Module):
        def __init__(self, config: ViTConfig, *, rngs: nnx.Rngs):
            p, d = config.patch, config.dim
            self.patch_embed = nnx.Conv(
                config.channels, d, kernel_size=(p, p), strides=(p, p), padding="VALID", rngs=rngs
            )
            self.cls_token = normal(rngs, (1, 1, d))
            self.pos_embed = normal(rngs, (1, config.tokens, d))
            self.dropout = nnx.Dropout(config.dropout, rngs=rngs)
            self.blocks = nnx.List(
                [
                    EncoderBlock(d, config.heads, config.mlp_dim, config.dropout, rngs=rngs)
                    for _ in range(config.depth)
                ]
            )
            self.norm = nnx.LayerNorm(d, rngs=rngs)
            self.head = nnx.Linear(d, config.classes, rngs=rngs)

        def __call__(self, images):
            x = self.patch_embed(images)
            batch, dim = x.shape[0], x.shape[-1]
            x = x.reshape(batch, -1, dim)
            cls = jnp.broadcast_to(self.cls_token[...], (batch, 1, dim))
            x = jnp.concatenate([cls, x], axis=1) + self.pos_embed[...]
            x = self.dropout(x)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x)[:, 0])

    class CausalSelfAttention(nnx.Module):
        """GPT-2 attention: one fused ``q/k/v`` Linear, ``jax.nn.dot_product_attention``."""

        def __init__(self, dim: int, heads: int, dropout: float, *, rngs: nnx.Rngs):
            self.heads = heads
            self.qkv = nnx.Linear(dim, 3 * dim, rngs=rngs)
            self.proj = nnx.Linear(dim, dim, rngs=rngs)
            self.dropout = nnx.Dropout(dropout, rngs=rngs)

        def __call__(self, x):
            q, k, v = jnp.split(self.qkv(x), 3, axis=-1)
            heads = (*x.shape[:-1], self.heads, x.shape[-1] // self.heads)
            y = jax.nn.dot_product_attention(
                q.reshape(heads), k.reshape(heads), v.reshape(heads), is_causal=True
            )
            return self.dropout(self.proj(y.reshape(x.shape)))

    class GPT2Block(nnx.Module):
        def __init__(self, dim: int, heads: int, dropout: float, *, rngs: nnx.Rngs):
            self.ln1 = nnx.LayerNorm(dim, rngs=rngs)
            self.attn = CausalSelfAttention(dim, heads, dropout, rngs=rngs)
            self.ln2 = nnx.LayerNorm(dim, rngs=rngs)
            self.mlp = MLPBlock(dim, 4 * dim, dropout, rngs=rngs)

        def __call__(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT2(nnx.Module):
        def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs):
            self.wte = nnx.Embed(config.vocab, config.dim, rngs=rngs)
            self.wpe = nnx.Embed(config.max_len, config.dim, rngs=rngs)
            self.dropout = nnx.Dropout(config.dropout, rngs=rngs)
            self.blocks = nnx.List(
                [
                    GPT2Block(config.dim, config.heads, config.dropout, rngs=rngs)
                    for _ in range(config.depth)
                ]
            )
            self.ln_f = nnx.LayerNorm(config.dim, rngs=rngs)

        def __call__(self, ids):
            positions = jnp.arange(ids.shape[-1])
            x = self.dropout(self.wte(ids) + self.wpe(positions))
            for block in self.blocks:
                x = block(x)
            return self.wte.attend(self.ln_f(x))

    class EncoderDecoderBlock(nnx.Module):
        """One encoder block over ``src`` and one decoder block over ``tgt``.

        The decoder's self-attention is causal (a lower-triangular mask); its
        cross-attention attends from ``tgt`` to the encoder's output. Returns
        ``(encoded, decoded)`` so blocks can be stacked.
        """

        def __init__(self, config: EncoderDecoderConfig, *, rngs: nnx.Rngs):
            d, h, r = config.dim, config.heads, config.dropout
            self.encoder = EncoderBlock(d, h, config.mlp_dim, r, rngs=rngs)
            self.ln_self = nnx.LayerNorm(d, rngs=rngs)
            self.self_attn = nnx.MultiHeadAttention(h, d, dropout_rate=r, decode=False, rngs=rngs)
            self.ln_cross = nnx.LayerNorm(d, rngs=rngs)
            self.cross_attn = nnx.MultiHeadAttention(h, d, dropout_rate=r, decode=False, rngs=rngs)
            self.ln_mlp = nnx.LayerNorm(d, rngs=rngs)
            self.mlp = MLPBlock(d, config.mlp_dim, r, rngs=rngs)

        def __call__(self, src, tgt):
            memory = self.encoder(src)
            causal = nnx.make_causal_mask(tgt[..., 0])
            x = tgt + self.self_attn(self.ln_self(tgt), mask=causal)
            x = x + self.cross_attn(self.ln_cross(x), memory)
            return memory, x + self.mlp(self.ln_mlp(x))

    return types.SimpleNamespace(
        MLP=MLP,
        CNN=CNN,
        MLPBlock=MLPBlock,
        EncoderBlock=EncoderBlock,
        ViT=ViT,
        CausalSelfAttention=CausalSelfAttention,
        GPT2Block=GPT2Block,
        GPT2=GPT2,
        EncoderDecoderBlock=EncoderDecoderBlock,
    )
