"""Flax Linen ``Conv``, ``ConvTranspose`` and ``ConvLocal``; Linen pooling cases.

``nn.Conv`` binds the NNX ``conv`` primitive (:mod:`jax2onnx_flax.conv`): one
ONNX ``Conv`` between one Transpose in and one out (the pair between two
consecutive convolutions cancels), the kernel permuted at conversion time and
the bias as the op's ``B`` input; SAME/VALID/explicit/CAUSAL padding are the
op's ``pads``, REFLECT and CIRCULAR a ``Pad`` before it. ``nn.ConvTranspose``
binds the NNX ``conv_transpose`` primitive (:mod:`jax2onnx_flax.conv_transpose`):
one ``ConvTranspose``; ``transpose_kernel=True`` flips and channel-swaps the
kernel at conversion time, CIRCULAR is the VALID op followed by Flax's
wrap-around sum. The stand-ins read ``kernel`` and ``bias`` with
``module.param`` exactly as the layers do (shapes, order, mask, dtype
promotion), so ``init`` inside a traced function still creates them; what the
primitives do not cover (a custom ``conv_general_dilated``, invalid
configurations Flax rejects, ``preferred_element_type``) runs Flax's own method.

``nn.ConvLocal`` (one kernel per output position) has no ONNX op. It runs
Flax's own method: ``lax.conv_general_dilated_local`` extracts patches with a
one-hot-kernel convolution (one ``Conv``, float32) and contracts each position
with its kernel in one batched ``MatMul``; the lax lowerings convert both
exactly as JAX computes them (float64: the lax plugin's exact ``Conv``
decomposition). A hand-written patch extraction would not be closer to JAX's
numbers, which come from that same convolution.

``nn.Conv`` and ``nn.ConvLocal`` share one method (``_Conv.__call__``), so one
stand-in serves both and dispatches on ``module.shared_weights``.

Pooling: ``nn.avg_pool``/``nn.max_pool`` are the aliases the
pooling family already intercepts (:mod:`jax2onnx_flax.pooling`); the cases
here call them from Linen modules.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, at_conversion, case
from jax2onnx_flax._util import (
    grad_of_squares,
    hashable_precision,
    linen_factory,
    linen_promoted,
    via_apply,
)
from jax2onnx_flax.conv import F32_ONLY, TRANSPOSE_IN_AND_OUT, broadcast_tuple, conv_p, flat_batch
from jax2onnx_flax.conv_transpose import _circular_fold, conv_transpose_p, transposed_kernel
from jax2onnx_flax.linen import LinenStandIn
from jax2onnx_flax.pooling import avg_pool_p, max_pool_p

family = Family("flax")
register = family.register


def _padding(module, n):
    """Flax's canonical padding (hashable), or None when Flax would reject it."""
    from flax.linen.linear import canonicalize_padding

    try:
        padding = canonicalize_padding(module.padding, n)
    except ValueError:
        return None
    return padding if isinstance(padding, str) else tuple(map(tuple, padding))


def _kernel_size(module):
    size = module.kernel_size
    return (size,) if isinstance(size, int) else tuple(size)


def _masked(module, kernel):
    if module.mask is None:
        return kernel
    return at_conversion(jnp.multiply, kernel, module.mask)


def _bias(module):
    if not module.use_bias:
        return None
    return module.param("bias", module.bias_init, (module.features,), module.param_dtype)


def conv(original, module, inputs):
    """``nn.Conv.__call__`` (shared weights): the ``conv`` primitive; ``nn.ConvLocal``: Flax's."""
    kernel_size = _kernel_size(module)
    n = len(kernel_size)
    padding = _padding(module, n)
    in_features = jnp.shape(inputs)[-1]
    groups = module.feature_group_count
    kernel_shape = (*kernel_size, in_features // groups, module.features)
    if (
        not module.shared_weights
        or module.conv_general_dilated is not None
        or module.conv_general_dilated_cls is not None
        or padding is None
        or (padding == "CAUSAL" and n != 1)
        or in_features % groups
        or (module.mask is not None and module.mask.shape != kernel_shape)
    ):
        return original(inputs)
    kernel = module.param("kernel", module.kernel_init, kernel_shape, module.param_dtype)
    kernel = _masked(module, kernel)
    x, kernel, bias = linen_promoted(module, (inputs, kernel, _bias(module)))
    params = dict(
        strides=broadcast_tuple(module.strides, n),
        padding=padding,
        input_dilation=broadcast_tuple(module.input_dilation, n),
        kernel_dilation=broadcast_tuple(module.kernel_dilation, n),
        groups=groups,
        precision=hashable_precision(module.precision),
    )
    rest = (kernel,) if bias is None else (kernel, bias)
    return flat_batch(x, n, lambda flat: conv_p.bind(flat, *rest, **params))


def conv_transpose(original, module, inputs):
    """``nn.ConvTranspose.__call__``: the ``conv_transpose`` primitive (CIRCULAR: + wrap sum)."""
    kernel_size = _kernel_size(module)
    n = len(kernel_size)
    padding = _padding(module, n)
    in_features = jnp.shape(inputs)[-1]
    if module.transpose_kernel:
        kernel_shape = (*kernel_size, module.features, in_features)
    else:
        kernel_shape = (*kernel_size, in_features, module.features)
    if (
        module.preferred_element_type is not None
        or padding is None
        or (isinstance(padding, str) and padding not in ("SAME", "VALID", "CIRCULAR"))
        or not 1 <= n <= 3
        or (module.mask is not None and module.mask.shape != kernel_shape)
    ):
        return original(inputs)
    kernel = module.param("kernel", module.kernel_init, kernel_shape, module.param_dtype)
    kernel = _masked(module, kernel)
    x, kernel, bias = linen_promoted(module, (inputs, kernel, _bias(module)))
    if module.transpose_kernel:
        kernel = transposed_kernel(kernel, n)
    circular = padding == "CIRCULAR"
    strides = broadcast_tuple(module.strides, n)
    params = dict(
        strides=strides,
        padding="VALID" if circular else padding,
        kernel_dilation=broadcast_tuple(module.kernel_dilation, n),
        precision=hashable_precision(module.precision),
    )

    def bind(flat):
        if not circular:
            return conv_transpose_p.bind(flat, kernel, *([] if bias is None else [bias]), **params)
        y = conv_transpose_p.bind(flat, kernel, **params)
        y = _circular_fold(y, flat.shape[1:-1], strides, module.transpose_kernel)
        return y if bias is None else y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))

    return flat_batch(x, n, bind)


# nn.Conv's __call__ is inherited (_Conv.__call__, shared with nn.ConvLocal): one stand-in
# serves both and runs Flax's method for ConvLocal.
LINEN = (
    LinenStandIn("Conv", "__call__", conv),
    LinenStandIn("ConvTranspose", "__call__", conv_transpose),
)


# -- cases ----------------------------------------------------------------------------


def _layer(name, *args, **kwargs):
    return lambda nn: getattr(nn, name)(*args, **kwargs)


class _Stack:
    """Two convolutions with a relu between: the layout Transposes between them cancel."""

    @staticmethod
    def build(nn):
        class Stack(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.relu(nn.Conv(4, (3, 3))(x))
                return nn.Conv(3, (3, 3), strides=2)(x)

        return Stack()


class _Pools:
    """A Linen module calling the pooling functions (intercepted as ``flax.linen.*``)."""

    @staticmethod
    def build(kind, *args, **kwargs):
        def build(nn):
            class Pooled(nn.Module):
                @nn.compact
                def __call__(self, x):
                    x = nn.Conv(4, (3, 3))(x)
                    return getattr(nn, kind)(x, *args, (2, 2), **kwargs)

            return Pooled()

        return build


def _conv(*args, wrap=None, init=(1, 6, 6, 2), **kwargs):
    return linen_factory(_layer("Conv", *args, **kwargs), init, wrap=wrap)


def _conv_t(*args, wrap=None, init=(1, 4, 4, 2), **kwargs):
    return linen_factory(_layer("ConvTranspose", *args, **kwargs), init, wrap=wrap)


def _conv_local(*args, wrap=None, init=(1, 5, 5, 2), **kwargs):
    return linen_factory(_layer("ConvLocal", *args, **kwargs), init, wrap=wrap)


_CONV_OP = ["Transpose -> Conv -> Transpose"]
_ONE_CONV = {**TRANSPOSE_IN_AND_OUT, "Add": 0, "Pad": 0}

family.add_cases(
    conv_p,
    lambda: [
        case(
            "linen_conv_2d_same",
            _conv(4, (3, 3)),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose:Bx6x6x4"],
            counts=_ONE_CONV,
            variants=["f32", "bf16"],  # bfloat16 inputs promote to the float32 kernel
        ),
        case(
            # computes in bfloat16 (dtype) with float32 parameters (param_dtype)
            "linen_conv_2d_dtype_bfloat16",
            _conv(4, (3, 3), dtype=jnp.bfloat16),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["Conv -> Cast -> Transpose:Bx6x6x4"],
            variants=["bf16"],
        ),
        case(
            "linen_conv_2d_f64", _conv(4, (3, 3)), [("B", 6, 6, 2)], factory=True, variants=["f64"]
        ),
        case(
            "linen_conv_1d_valid_strided_no_bias",
            _conv(3, 3, strides=2, padding="VALID", use_bias=False, init=(1, 9, 2)),
            [("B", 9, 2)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose:Bx4x3"],
            counts=_ONE_CONV,
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_explicit_pads",
            _conv(3, (2, 3), strides=(2, 1), padding=((1, 0), 2)),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose:Bx3x8x3"],
            counts=_ONE_CONV,
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_int_padding",
            _conv(3, (3, 3), padding=2),
            [("B", 6, 6, 2)],
            factory=True,
        ),
        case(
            "linen_conv_dilated_grouped",
            _conv(6, (3, 3), kernel_dilation=2, feature_group_count=2, init=(1, 9, 9, 4)),
            [("B", 9, 9, 4)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose:Bx9x9x6"],
            counts=_ONE_CONV,
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_input_dilation",
            # ONNX Conv has no input dilation: the primitive inlines lax's convolution
            _conv(3, (3, 3), input_dilation=2, padding=((1, 1), (0, 2)), init=(1, 4, 5, 2)),
            [("B", 4, 5, 2)],
            factory=True,
        ),
        case(
            "linen_conv_circular",
            _conv(3, (3, 4), padding="CIRCULAR"),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["Transpose -> Pad -> Conv -> Transpose:Bx6x6x3"],
            counts={**TRANSPOSE_IN_AND_OUT, "Add": 0},
            opset=19,
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_causal",
            _conv(3, 3, padding="CAUSAL", kernel_dilation=2, init=(1, 10, 2)),
            [("B", 10, 2)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose:Bx10x3"],
            counts=_ONE_CONV,
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_mask",
            _conv(3, (3, 3), mask=np.tril(np.ones((3, 3, 2, 3), np.float32), -1)),
            [("B", 6, 6, 2)],
            factory=True,
            expect=_CONV_OP,
            counts={**_ONE_CONV, "Mul": 0},
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_symbolic_spatial",
            _conv(3, 3, strides=2, init=(1, 9, 2)),
            [("B", "T", 2)],
            factory=True,
            expect=["Transpose -> Conv -> Transpose"],
            counts=_ONE_CONV,
            dim_sizes={"B": (3, 2, 5), "T": (9, 4, 7)},
            variants=F32_ONLY,
        ),
        case("linen_conv_unbatched", _conv(3, (3, 3)), [(6, 6, 2)], factory=True),
        case(
            "linen_conv_two_batch_dims",
            _conv(3, 3, init=(1, 6, 2)),
            [("B", 2, 6, 2)],
            factory=True,
            expect=["Conv"],
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_custom_conv_general_dilated",
            # Flax's own method, through the lax lowerings
            _conv(3, (3, 3), conv_general_dilated=jax.lax.conv_general_dilated),
            [("B", 6, 6, 2)],
            factory=True,
        ),
        case(
            "linen_conv_apply_lambda",
            _conv(4, (3, 3), wrap=via_apply),
            [("B", 6, 6, 2)],
            factory=True,
            expect=_CONV_OP,
            counts=_ONE_CONV,
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_vmap",
            _conv(3, (3, 3), wrap=jax.vmap),
            [("B", 2, 6, 6, 2)],
            factory=True,
            expect=["Conv"],
            counts={"Conv": 1},
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_grad",
            _conv(3, (3, 3), strides=2, wrap=grad_of_squares),
            [(2, 6, 6, 2)],
            factory=True,
        ),
        case(
            "linen_conv_stack",
            linen_factory(_Stack.build, (1, 8, 8, 2)),
            [("B", 8, 8, 2)],
            factory=True,
            expect=["Transpose -> Conv -> Relu -> Conv -> Transpose:Bx4x4x3"],
            counts={"Transpose": 2, "Add": 0},
            variants=F32_ONLY,
        ),
    ],
)

family.add_cases(
    conv_transpose_p,
    lambda: [
        case(
            "linen_conv_transpose_same_strided",
            _conv_t(4, (3, 3), strides=(2, 2)),
            [("B", 4, 4, 2)],
            factory=True,
            expect=["Transpose -> ConvTranspose -> Transpose:Bx8x8x4"],
            counts={**TRANSPOSE_IN_AND_OUT, "Add": 0},
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_transpose_f64",
            _conv_t(4, (3, 3), strides=(2, 2)),
            [("B", 4, 4, 2)],
            factory=True,
            variants=["f64"],
        ),
        case(
            "linen_conv_transpose_1d_valid_no_bias",
            _conv_t(3, 3, strides=(3,), padding="VALID", use_bias=False, init=(1, 5, 2)),
            [("B", 5, 2)],
            factory=True,
            expect=["Transpose -> ConvTranspose -> Transpose:Bx15x3"],
            counts=TRANSPOSE_IN_AND_OUT,
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_transpose_explicit_pads_dilated",
            _conv_t(3, (3, 2), strides=(2, 1), padding=((1, 2), 1), kernel_dilation=(1, 2)),
            [("B", 4, 4, 2)],
            factory=True,
            expect=["Transpose -> ConvTranspose -> Transpose"],
            counts=TRANSPOSE_IN_AND_OUT,
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_transpose_transpose_kernel",
            _conv_t(3, (3, 2), strides=(2, 2), transpose_kernel=True),
            [("B", 4, 4, 2)],
            factory=True,
            expect=["Transpose -> ConvTranspose -> Transpose"],
            counts={**TRANSPOSE_IN_AND_OUT, "Slice": 0},
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_transpose_circular",
            _conv_t(3, (3, 3), strides=(2, 2), padding="CIRCULAR"),
            [("B", 4, 4, 2)],
            factory=True,
        ),
        case(
            "linen_conv_transpose_circular_transpose_kernel",
            _conv_t(
                3, (4,), strides=(2,), padding="CIRCULAR", transpose_kernel=True, init=(1, 5, 2)
            ),
            [("B", 5, 2)],
            factory=True,
            expect=["ConvTranspose"],
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_transpose_unbatched",
            _conv_t(3, (3, 3), strides=(2, 2)),
            [(4, 4, 2)],
            factory=True,
        ),
        case(
            "linen_conv_transpose_apply_lambda",
            _conv_t(4, (3, 3), strides=(2, 2), wrap=via_apply),
            [("B", 4, 4, 2)],
            factory=True,
            expect=["Transpose -> ConvTranspose -> Transpose:Bx8x8x4"],
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_transpose_vmap",
            _conv_t(3, (3, 3), strides=(2, 2), wrap=jax.vmap),
            [("B", 2, 4, 4, 2)],
            factory=True,
            counts={"ConvTranspose": 1},
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_transpose_grad",
            _conv_t(3, (3, 3), strides=(2, 2), wrap=grad_of_squares),
            [(2, 4, 4, 2)],
            factory=True,
        ),
    ],
)

family.add_cases(
    "linen.ConvLocal",
    lambda: [
        case(
            "linen_conv_local_2d",
            _conv_local(4, (3, 3)),
            [("B", 5, 5, 2)],
            factory=True,
            expect=["Conv -> Transpose -> MatMul"],
            variants=F32_ONLY,
        ),
        case(
            "linen_conv_local_2d_f64",
            _conv_local(4, (3, 3)),
            [("B", 5, 5, 2)],
            factory=True,
            variants=["f64"],
        ),
        case(
            "linen_conv_local_1d_strided_no_bias",
            _conv_local(3, 3, strides=2, padding="VALID", use_bias=False, init=(1, 9, 2)),
            [("B", 9, 2)],
            factory=True,
        ),
        case(
            "linen_conv_local_apply_lambda",
            _conv_local(3, (2, 2), strides=2, wrap=via_apply),
            [("B", 5, 5, 2)],
            factory=True,
        ),
        case(
            "linen_conv_local_grad",
            _conv_local(3, (3, 3), wrap=grad_of_squares),
            [(2, 5, 5, 2)],
            factory=True,
        ),
    ],
)

family.add_cases(
    max_pool_p,
    lambda: [
        case(
            "linen_max_pool_in_module",
            linen_factory(_Pools.build("max_pool", strides=(2, 2)), (1, 6, 6, 2)),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["Transpose -> Conv -> MaxPool"],
            counts={"Transpose": 2},
            variants=F32_ONLY,
        ),
        case(
            "linen_max_pool_apply_lambda",
            linen_factory(_Pools.build("max_pool", padding="SAME"), (1, 6, 6, 2), wrap=via_apply),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["MaxPool"],
        ),
    ],
)

family.add_cases(
    avg_pool_p,
    lambda: [
        case(
            "linen_avg_pool_in_module",
            linen_factory(_Pools.build("avg_pool", strides=(2, 2)), (1, 6, 6, 2)),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["Transpose -> Conv -> AveragePool -> Transpose:Bx3x3x4"],
            counts={"Transpose": 2},
            variants=F32_ONLY,
        ),
        case(
            "linen_avg_pool_apply_lambda",
            linen_factory(
                _Pools.build("avg_pool", padding="SAME", count_include_pad=False),
                (1, 6, 6, 2),
                wrap=via_apply,
            ),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["AveragePool"],
            variants=F32_ONLY,
        ),
    ],
)

family.add_cases(
    "linen.pool",
    lambda: [
        case(
            "linen_pool_generic_max",
            # nn.pool with lax.max: reduce_window_max, which the lax plugin lowers to MaxPool
            linen_factory(
                _Pools.build("pool", -np.inf, jax.lax.max, strides=(2, 2), padding="VALID"),
                (1, 6, 6, 2),
            ),
            [("B", 6, 6, 2)],
            factory=True,
            expect=["MaxPool"],
        ),
    ],
)
