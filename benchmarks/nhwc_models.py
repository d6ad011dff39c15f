"""Channels-last CNNs written the way Haiku and Keras write them, for the benchmark.

Plain JAX, no framework: parameters live in a dict (random, nothing is
downloaded), images are (N, H, W, C), kernels (H, W, in, out), and BatchNorm
in inference applies its statistics as Haiku does, ``(x - mean) * (scale *
rsqrt(var + eps)) + offset``, so the exported graph has per-channel
arithmetic between the convolutions, as a real export of such a model does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Config:
    """``widths`` per stage; ``image`` side; ``classes`` of the head."""

    widths: tuple[int, ...]
    image: int = 224
    classes: int = 1000
    channels: int = 3


RESNET18 = Config((64, 128, 256, 512))
RESNET_SMALL = Config((8, 16), image=32, classes=10)
MOBILENET = Config((32, 64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024))
MOBILENET_SMALL = Config((8, 16, 32, 32), image=32, classes=10)


class Model:
    """A pure function of an NHWC image batch with its parameters closed over."""

    def __init__(self, forward: Any, params: dict[str, np.ndarray]) -> None:
        self.forward, self.params = forward, params

    def __call__(self, x: Any) -> Any:
        return self.forward(self.params, x)


class _Params:
    def __init__(self, seed: int) -> None:
        self.rng, self.params = np.random.default_rng(seed), {}

    def conv(self, name: str, k: int, cin: int, cout: int) -> None:
        scale = np.sqrt(2.0 / (k * k * cin))
        w = self.rng.standard_normal((k, k, cin, cout)) * scale
        self.params[name] = w.astype(np.float32)

    def bn(self, name: str, c: int) -> None:
        r = self.rng
        self.params[f"{name}/mean"] = (0.1 * r.standard_normal(c)).astype(np.float32)
        self.params[f"{name}/var"] = (1 + 0.1 * r.random(c)).astype(np.float32)
        self.params[f"{name}/scale"] = (1 + 0.1 * r.standard_normal(c)).astype(np.float32)
        self.params[f"{name}/offset"] = (0.1 * r.standard_normal(c)).astype(np.float32)

    def dense(self, name: str, cin: int, cout: int) -> None:
        w = self.rng.standard_normal((cin, cout)) / np.sqrt(cin)
        self.params[f"{name}/w"] = w.astype(np.float32)
        self.params[f"{name}/b"] = np.zeros(cout, np.float32)


def _conv(p: dict, name: str, x: Any, stride: int = 1, groups: int = 1) -> Any:
    from jax import lax

    return lax.conv_general_dilated(
        x,
        p[name],
        (stride, stride),
        "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups,
    )


def _bn(p: dict, name: str, x: Any) -> Any:
    from jax import lax

    inv = p[f"{name}/scale"] * lax.rsqrt(p[f"{name}/var"] + 1e-5)
    return (x - p[f"{name}/mean"]) * inv + p[f"{name}/offset"]


def _head(p: dict, x: Any) -> Any:
    return x.mean(axis=(1, 2)) @ p["head/w"] + p["head/b"]


def resnet(config: Config = RESNET18, seed: int = 0) -> Model:
    """ResNet v1 with basic blocks (two per stage, ResNet-18 at the default widths)."""
    import jax
    from jax import lax

    init = _Params(seed)
    init.conv("stem", 7, config.channels, config.widths[0])
    init.bn("stem_bn", config.widths[0])
    blocks = []
    cin = config.widths[0]
    for stage, width in enumerate(config.widths):
        for b in range(2):
            stride = 2 if stage and not b else 1
            name = f"s{stage}b{b}"
            init.conv(f"{name}/c1", 3, cin, width)
            init.bn(f"{name}/bn1", width)
            init.conv(f"{name}/c2", 3, width, width)
            init.bn(f"{name}/bn2", width)
            project = stride != 1 or cin != width
            if project:
                init.conv(f"{name}/proj", 1, cin, width)
                init.bn(f"{name}/proj_bn", width)
            blocks.append((name, stride, project))
            cin = width
    init.dense("head", cin, config.classes)

    def forward(p: dict, x: Any) -> Any:
        x = jax.nn.relu(_bn(p, "stem_bn", _conv(p, "stem", x, 2)))
        x = lax.reduce_window(x, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        for name, stride, project in blocks:
            y = jax.nn.relu(_bn(p, f"{name}/bn1", _conv(p, f"{name}/c1", x, stride)))
            y = _bn(p, f"{name}/bn2", _conv(p, f"{name}/c2", y))
            if project:
                x = _bn(p, f"{name}/proj_bn", _conv(p, f"{name}/proj", x, stride))
            x = jax.nn.relu(x + y)
        return _head(p, x)

    return Model(forward, init.params)


def mobilenet(config: Config = MOBILENET, seed: int = 0) -> Model:
    """MobileNet v1: depthwise-separable blocks with ReLU6; stride 2 where the width doubles
    (and at the last doubling to 1024), as in the paper's table."""
    import jax

    init = _Params(seed)
    first, *rest = config.widths
    init.conv("stem", 3, config.channels, first)
    init.bn("stem_bn", first)
    blocks, cin = [], first
    for i, width in enumerate(rest):
        stride = 2 if width > cin and width != 2 * first else 1
        init.conv(f"b{i}/dw", 3, 1, cin)
        init.bn(f"b{i}/dw_bn", cin)
        init.conv(f"b{i}/pw", 1, cin, width)
        init.bn(f"b{i}/pw_bn", width)
        blocks.append((f"b{i}", stride, cin))
        cin = width
    init.dense("head", cin, config.classes)

    def forward(p: dict, x: Any) -> Any:
        x = jax.nn.relu6(_bn(p, "stem_bn", _conv(p, "stem", x, 2)))
        for name, stride, channels in blocks:
            x = _conv(p, f"{name}/dw", x, stride, groups=channels)
            x = jax.nn.relu6(_bn(p, f"{name}/dw_bn", x))
            x = jax.nn.relu6(_bn(p, f"{name}/pw_bn", _conv(p, f"{name}/pw", x)))
        return _head(p, x)

    return Model(forward, init.params)
