"""Lowerings that cannot express an input say so, naming the primitive and the user's line."""

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx import to_onnx
from jax2onnx.errors import LoweringError


def test_hessenberg_of_an_empty_matrix_is_refused_clearly():
    # JAX's own hessenberg gives the taus of a 0 x 0 matrix the shape (-1,) and fails on CPU
    with pytest.raises(LoweringError, match=r"hessenberg at .*test_errors.py"):
        to_onnx(lambda x: lax.linalg.hessenberg(x)[0], [(0, 0)])


def test_float8_bitcast_below_opset_26_names_the_opset():
    # float16/bfloat16/float32/float64 bitcasts are exact arithmetic below 26; float8 is not
    def f(x):
        return lax.bitcast_convert_type(x.astype(jnp.float8_e4m3fn), np.int8)

    with pytest.raises(LoweringError, match=r"bitcast_convert_type at .*test_errors.py.*opset=26"):
        to_onnx(f, [(3,)], opset=23)


def test_schur_refuses_sorted_eigenvalues():
    with pytest.raises(LoweringError, match=r"schur at .*test_errors.py.*sort_eig_vals"):
        to_onnx(lambda x: lax.linalg.schur(x, sort_eig_vals=True)[0], [(3, 3)])


def test_svd_refuses_subset_by_index():  # eigh's subset: test_eigh_subset.py
    with pytest.raises(LoweringError, match=r"svd at .*test_errors.py.*subset_by_index"):
        to_onnx(
            lambda x: lax.linalg.svd(x, full_matrices=False, subset_by_index=(1, 3))[1], [(4, 3)]
        )


def test_rng_uniform_is_refused_pointing_to_jax_random():
    with pytest.raises(LoweringError, match=r"rng_uniform at .*test_errors.py.*use jax.random"):
        to_onnx(lambda x: x + lax.rng_uniform(0.0, 1.0, (3,)), [(3,)])


def test_threefry_bit_generator_refuses_a_layout_a_symbolic_size_decides():
    # 32-bit RNG_THREE_FRY halves the first even axis: unknown while B is symbolic
    def f(k, x):
        return lax.rng_bit_generator(k, x.shape, algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)[1]

    with pytest.raises(LoweringError, match=r"rng_bit_generator at .*test_errors.py.*RNG_PHILOX"):
        to_onnx(f, [np.zeros(4, np.uint32), ("B", 3)])
