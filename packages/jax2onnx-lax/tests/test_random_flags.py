"""The jax.random cases again with jax_threefry_partitionable off (True is JAX 0.10's default).

The key primitives trace JAX's own PRNG functions when converting, so the flag's value
at conversion time picks the same counters JAX uses; these runs prove both layouts.
"""

from __future__ import annotations

import jax
import pytest

import jax2onnx
from jax2onnx_testkit.check import check_case, variants_of

_NAMES = (
    "bits_uint8",
    "bits_uint16",
    "bits_uint64",
    "bits_symbolic",
    "bits_vmap_keys",
    "normal",
    "randint",
    "permutation",
    "split",
    "split_2d",
    "split_vmap",
    "fold_in",
    "vmap_keys_symbolic",
    # rbg keys: their split, fold_in and seeding go through threefry too
    "rbg_split",
    "rbg_fold_in",
    "rbg_seed",
    "unsafe_rbg_seed",
    "rbg_normal",
)


def _variants():
    rules = next(p.rules for p in jax2onnx.plugins().plugins if p.name == "lax")
    found = [(component, c) for component, c in rules.cases if c.name in _NAMES]
    assert {c.name for _, c in found} == set(_NAMES)
    return [v for component, c in found for v in variants_of("lax", component, c)]


@pytest.mark.parametrize("variant", _variants(), ids=lambda v: v.id)
def test_case_without_partitionable_threefry(variant):
    assert jax.config.jax_threefry_partitionable  # the default this module flips
    with jax.threefry_partitionable(False):
        check_case(variant)
