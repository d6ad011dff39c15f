"""Cases of the fusion pass (:mod:`jax2onnx.passes.fusion`), filed under ``fusion.<name>``.

They belong to the core plugin: the pass is the core's. Each module here has a
``cases()`` function returning the positive cases (written as the libraries
that do not call our intercepted functions write them: Flax Linen and
``transformers`` with functions captured at import time, Haiku and Keras in
plain ``jnp``) and the negative ones (a pattern that must not fuse), with
``counts=`` pinning the fused or unfused form. Importing this package imports
no case module: the functions run when the testkit reads the cases.
"""

from __future__ import annotations

import functools
import importlib

from jax2onnx.registration.family import Family

family = Family("core")
MODULES = (
    "layer_norm",
    "keras_norm",
    "rms_norm",
    "group_norm",
    "batch_norm_fold",
    "activations",
    "softmax",
    "attention",
    "rotary",
)


def _cases(name: str) -> list:
    return importlib.import_module(f"{__name__}.{name}").cases()


for _name in MODULES:
    family.add_cases(f"fusion.{_name}", functools.partial(_cases, _name))

register = family.register
