"""Cases of symbolic shapes as models write them: slices of symbolic extent and
dimension arithmetic (``T // 2``, ``min(B, 4)``, the ceiling ``-(-B // 3)``).

Every case here has symbolic dimensions, so its dynamic variant converts once
and runs in ONNX Runtime at two sizes; the sizes are chosen so that divisions
are inexact at one of them and a ``min`` takes each side.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case

family = Family("lax")

_I32 = np.int32


_KERNEL = np.random.default_rng(7).standard_normal((3, 3, 3, 4)).astype(np.float32)
_NHWC = ("NHWC", "HWIO", "NHWC")
_IMAGE = {"H": (7, 8, 5), "W": (6, 5, 9)}  # odd and even sizes: SAME pads differ


def _conv_same(x, stride=2, dilation=1):
    w = jnp.asarray(_KERNEL, x.dtype)
    return lax.conv_general_dilated(
        x, w, (stride, stride), "SAME", rhs_dilation=(dilation, dilation), dimension_numbers=_NHWC
    )


def _small_cnn(x):
    """Stride-2 SAME conv, SAME max pool, global average: a CNN for images of any size."""
    y = jax.nn.relu(_conv_same(x))
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    return jnp.mean(y, axis=(1, 2))


def _per_sample_depthwise(x, kernels):
    """Each image with its own depthwise kernels (dynamic convolutions, hypernetworks):
    under vmap JAX folds the batch into the groups (feature_group_count = 4*B)."""

    def one(image, k):
        y = lax.conv_general_dilated(
            image[None], k, (1, 1), "SAME", dimension_numbers=_NHWC, feature_group_count=4
        )
        return y[0]

    return jax.vmap(one)(x, kernels)


def _per_sample_kernel_grads(x, kernels):
    """Per-example gradients of a conv's kernel (DP-SGD): the batch becomes batch groups."""

    def one(image, k):
        def loss(k):
            y = lax.conv_general_dilated(image[None], k, (2, 2), "SAME", dimension_numbers=_NHWC)
            return jnp.sum(y * y)

        return jax.grad(loss)(k)

    return jax.vmap(one)(x, kernels)


_POSITIONS = np.random.default_rng(3).standard_normal((1, 16, 4)).astype(np.float32)


def _add_positions(x):
    """GPT-style learned positions: the table cut to the sequence length."""
    return x + jnp.asarray(_POSITIONS, x.dtype)[:, : x.shape[1]]


def _vmapped_half_window(x, starts):
    """A window of T // 2 per row: a gather with a batch of starts and a symbolic window."""
    return jax.vmap(lambda row, i: lax.dynamic_slice_in_dim(row, i, row.shape[0] // 2))(x, starts)


family.add_cases(
    lax.gather_p,
    lambda: [
        case(
            "lm_shift",
            lambda x: x[:, 1:] - x[:, :-1],
            [("B", "T", 4)],
            expect=["Slice -> Sub"],
            counts={"GatherND": 0, "Gather": 0},
        ),
        case(
            "first_half",
            lambda x: x[:, : x.shape[1] // 2],
            [("B", "T")],
            dim_sizes={"T": (4, 5, 8)},
            expect=["Slice"],
            counts={"GatherND": 0},
        ),
        case(
            "drop_first",
            lambda x: x[1:] * 2.0,
            [("B", 3)],
            expect=["Slice -> Mul"],
            counts={"GatherND": 0},
        ),
        case(
            "first_four_of_any",
            lambda x: x[:4] + 1.0,
            [("B", 3)],
            dim_sizes={"B": (6, 2, 7)},  # min(B, 4) takes B, then 4
            expect=["Slice -> Add"],
        ),
        case(
            "half_of_an_even_axis",
            lambda x: x[: x.shape[0] // 2] * x[x.shape[0] // 2 :],
            [("2*b", 3)],  # b is known only as half of the axis: solved from its size
            expect=["Slice -> Mul"],
        ),
        case(
            "positions_cut_to_length",
            _add_positions,
            [("B", "T", 4)],
            constraints=["T <= 16"],  # without it JAX cannot tell T rows from min(16, T)
            dim_sizes={"T": (5, 1, 16)},
        ),
        case(
            "vmap_half_window",
            _vmapped_half_window,
            [("B", "T"), ("B",)],
            dtypes=[None, _I32],
            dim_sizes={"T": (4, 5, 8)},
            input_range=(-2, 8),
            expect=["GatherND"],
        ),
    ],
)


family.add_cases(
    lax.broadcast_in_dim_p,
    lambda: [
        case(
            "ceil_div_dim",
            lambda x: jnp.ones((-(-x.shape[0] // 3), 2)) * jnp.sum(x),
            [("B",)],
            dim_sizes={"B": (3, 5, 7)},  # a floor-truncating Div gives 1 and 2, not 2 and 3
        ),
        case(
            "mod_dim",
            lambda x: jnp.zeros((x.shape[0] % 3 + 1, 2)) + jnp.max(x),
            [("B",)],
            dim_sizes={"B": (3, 5, 7)},
        ),
    ],
)


family.add_cases(
    lax.conv_general_dilated_p,
    lambda: [
        case(
            "same_stride2_symbolic",
            _conv_same,
            [("B", "H", "W", 3)],
            dim_sizes=_IMAGE,
        ),
        case(
            "same_stride2_dilated_symbolic",
            lambda x: _conv_same(x, dilation=2),
            [("B", "H", "W", 3)],
            dim_sizes=_IMAGE,  # ONNX Runtime's SAME_UPPER takes no dilation: a computed Pad
        ),
        case(
            "small_cnn_any_size",
            _small_cnn,
            [("B", "H", "W", 3)],
            dim_sizes=_IMAGE,
        ),
        case(
            "per_sample_depthwise_kernels",
            _per_sample_depthwise,
            [("B", 5, 6, 4), ("B", 3, 3, 1, 4)],
        ),
        case(
            "per_sample_kernel_grads",
            _per_sample_kernel_grads,
            [("B", 5, 5, 2), ("B", 3, 3, 2, 3)],
        ),
    ],
)


family.add_cases(
    lax.reduce_window_max_p,
    lambda: [
        case(  # H = 1 and W = 1 are shorter than the window: no outputs, as in JAX
            "max_pool_valid_short_axes_symbolic",
            lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
            [("B", "H", "W", 3)],
            dim_sizes={"B": (2, 2, 1, 3), "H": (5, 1, 4, 7), "W": (4, 3, 1, 6)},
            expect=["MaxPool"],
        ),
        case(  # int32: the general form (strided Slices), whose ends stay at 0 or more
            "max_pool_valid_short_axes_int_symbolic",
            lambda x: lax.reduce_window(x, -(2**31), lax.max, (1, 2, 1), (1, 2, 1), "VALID"),
            [("B", "T", 3)],
            dtypes=[np.int32],
            dim_sizes={"B": (2, 2, 1), "T": (7, 1, 4)},
        ),
    ],
)


family.add_cases(
    lax.reduce_window_sum_p,
    lambda: [
        case(
            "sum_pool_same_stride2_symbolic",
            lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
            [("B", "H", "W", 3)],
            dim_sizes=_IMAGE,
        ),
    ],
)


family.add_cases(
    lax.split_p,
    lambda: [
        case("split_halves", lambda x: jnp.split(x, 2, axis=1), [(3, "2*b")], expect=["Split"]),
        case("split_b_plus_1", lambda x: jnp.split(x, [1], axis=0), [("b + 1", 2)]),
    ],
)


family.add_cases(
    lax.pad_p,
    lambda: [
        case(
            "pad_by_own_size",
            lambda x: jnp.pad(x, ((0, x.shape[0]), (1, 1))),
            [("B", 2)],
            expect=["Pad"],
        ),
        case(
            "pad_to_even",
            lambda x: jnp.pad(x, (0, x.shape[0] % 2), constant_values=-1.0),
            [("B",)],
        ),
    ],
)


family.add_cases(
    lax.scatter_mul_p,
    lambda: [
        case(
            "segment_prod_buckets",
            lambda x, ids: jax.ops.segment_prod(x, ids, num_segments=3, bucket_size=2),
            [("B",), ("B",)],
            dtypes=[None, _I32],
            dim_sizes={"B": (4, 5, 7)},  # ceil(B / 2) buckets
            input_range=(0, 3),
        ),
    ],
)


register = family.register
