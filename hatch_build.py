"""Metadata hook of the ``jax2onnx`` meta distribution.

From a source tree the meta package depends on the sibling distributions in
``packages/`` by path, so ``pip install ".[all]"`` works on a fresh machine.
With ``JAX2ONNX_RELEASE=1`` it pins them to the shared version instead, for
publishing.
"""

from __future__ import annotations

import os
import pathlib

from hatchling.metadata.plugin.interface import MetadataHookInterface

CORE = ["core", "lax", "nn"]
# the docs build converts the gallery's Flax, Equinox and diffrax models with the testkit
EXTRAS = {
    "flax": ["flax"],
    "equinox": ["equinox"],
    "test": ["testkit"],
    "docs": ["flax", "equinox[test]", "testkit"],
}
THIRD_PARTY = {
    # hatchling: the docs test installs the tutorial's plugin offline (--no-build-isolation)
    "test": [
        "onnxruntime>=1.20",
        "pytest>=8",
        "pytest-xdist>=3.5",
        "hypothesis>=6.100",
        "hatchling>=1.21",
        # tests/test_keras_mixed_precision.py: Keras 3 exports through jax2onnx (JAX backend)
        "keras>=3.8,<4",
    ],
    "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10", "mkdocstrings[python]>=0.26,<2"],
    # benchmarks/mjx_cartpole.py: MuJoCo's JAX physics; a benchmark's, not the suite's
    "bench": ["mujoco-mjx>=3.17,<4"],
}
NOT_IN_ALL = {"bench"}


class MetaDependencies(MetadataHookInterface):
    PLUGIN_NAME = "custom"

    def update(self, metadata: dict) -> None:
        version = metadata["version"]
        root = pathlib.Path(self.root)
        release = os.environ.get("JAX2ONNX_RELEASE") == "1"

        def requirement(short: str) -> str:
            short, _, extra = short.partition("[")  # "equinox[test]": with its test extra
            name = f"jax2onnx-{short}"
            wanted = f"{name}[{extra}" if extra else name
            if release:
                return f"{wanted}=={version}"
            return f"{wanted} @ {(root / 'packages' / name).as_uri()}"

        metadata["dependencies"] = [requirement(s) for s in CORE]
        extras = {k: [requirement(s) for s in v] for k, v in EXTRAS.items()}
        for key, reqs in THIRD_PARTY.items():
            extras.setdefault(key, []).extend(reqs)
        # the suite also runs each plugin's test dependencies (equinox: diffrax, lineax, optimistix)
        extras["all"] = sorted(
            {
                r
                for key, reqs in extras.items()
                if key not in NOT_IN_ALL
                for r in reqs
                if not r.startswith("jax2onnx-equinox ")
            }
            | {requirement("equinox[test]")}
        )
        metadata["optional-dependencies"] = extras
