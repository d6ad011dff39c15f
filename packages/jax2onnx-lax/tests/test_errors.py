"""Lowerings that cannot express an input say so, naming the primitive and the user's line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx import to_onnx
from jax2onnx.values.errors import LoweringError, UsageError


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


def test_svd_subset_beyond_the_singular_values_is_refused():  # the subset: test_svd_subset.py
    with pytest.raises(LoweringError, match=r"svd at .*test_errors.py.*hi must be at most 3"):
        to_onnx(
            lambda x: lax.linalg.svd(x, full_matrices=False, subset_by_index=(1, 5))[1], [(4, 3)]
        )


def test_svd_subset_with_a_negative_start_is_refused():
    with pytest.raises(LoweringError, match=r"svd at .*test_errors.py.*0 <= lo <= hi"):
        to_onnx(
            lambda x: lax.linalg.svd(x, full_matrices=False, subset_by_index=(-1, 2))[1], [(4, 3)]
        )


def test_svd_subset_symbolic_sizes_may_not_hold_asks_for_a_constraint():
    with pytest.raises(LoweringError, match=r"svd at .*test_errors.py.*constraints"):
        to_onnx(
            lambda x: lax.linalg.svd(x, full_matrices=False, subset_by_index=(1, 3))[1],
            [("M", "N")],
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


_BOOL = jnp.bool_


def _masked_inputs(*shapes):
    x, *masks = shapes
    return [x, *(jax.ShapeDtypeStruct(m, _BOOL) for m in masks)]


def test_masked_update_with_one_value_per_selected_element_is_refused_clearly():
    # JAX: NonConcreteBooleanIndexError; the values x[m] * 2 have one entry per true entry
    def f(x, m):
        return x.at[m].set(x[m] * 2.0)

    with pytest.raises(UsageError, match=r"mask at .*test_errors.py.*jnp.where\(m, y, x\)"):
        to_onnx(f, _masked_inputs((8,), (8,)))


def test_masked_update_with_two_masks_is_refused_clearly():
    def f(x, m, n):
        return x.at[m, n].set(0.0)

    with pytest.raises(UsageError, match=r"mask at .*test_errors.py.*2 boolean masks"):
        to_onnx(f, _masked_inputs((4, 5), (4,), (5,)))


def test_masked_update_mixed_with_an_integer_index_is_refused_clearly():
    def f(x, m):
        return x.at[0, m].add(1.0)

    with pytest.raises(UsageError, match=r"mask at .*test_errors.py.*mixes the mask with 0"):
        to_onnx(f, _masked_inputs((4, 5), (5,)))


def test_masked_update_with_a_mask_of_another_shape_is_refused_clearly():
    def f(x, m):
        return x.at[m].set(0.0)

    with pytest.raises(UsageError, match=r"mask at .*test_errors.py.*\(3,\) is not that of"):
        to_onnx(f, _masked_inputs((4, 5), (3,)))
