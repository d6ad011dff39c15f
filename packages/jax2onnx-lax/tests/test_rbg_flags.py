"""jax.random under ``jax_default_prng_impl`` = rbg / unsafe_rbg (the rbg cases with
jax_threefry_partitionable off are in test_random_flags.py).

Under the flag, ``jax.random.PRNGKey`` gives raw ``uint32[4]`` keys and every sampler wraps
them with the rbg implementation: the graph takes that key data as its input.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jax2onnx.plugin import case
from jax2onnx_testkit.check import check_case, variants_of

_KEY = np.array([0x12345678, 0x9ABCDEF0, 0xFFFFFFFF, 0xFFFFFFFE], np.uint32)


def _split_and_draw(k):
    a, b = jax.random.split(k)
    return jax.random.bits(a, (5,)), jax.random.uniform(jax.random.fold_in(b, 3), (2, 3)), b


_FLAG_CASES = (
    case(
        "flag_uniform",
        lambda k: jax.random.uniform(k, (3, 5)),
        [_KEY],
        variants=["f32", "f64"],
        tolerances={"float32": (0.0, 0.0), "float64": (0.0, 0.0)},
    ),
    case("flag_bits", lambda k: jax.random.bits(k, (4, 3)), [_KEY]),
    case("flag_split_fold_in", _split_and_draw, [_KEY]),
    case(
        "flag_seed",
        lambda s: jax.random.bits(jax.random.PRNGKey(s), (7,)),
        [np.array(42, np.int32)],
    ),
    case(
        "flag_normal_symbolic_batch",
        lambda k, x: x + jax.random.normal(k, x.shape, x.dtype),
        [_KEY, ("B", 3)],
    ),
)


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
@pytest.mark.parametrize("c", _FLAG_CASES, ids=lambda c: c.name)
def test_default_prng_impl_flag(impl, c):
    with jax.default_prng_impl(impl):
        assert jax.random.PRNGKey(0).shape == (4,)
        for variant in variants_of("lax", "rng_bit_generator", c):
            check_case(variant)
