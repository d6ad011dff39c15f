"""Values ONNX stores differently from JAX: key arrays and complex numbers.

Complex numbers: ONNX Runtime has no complex tensor type, so a ``complex64``
(``complex128``) array of shape ``S`` is stored as a ``float32`` (``float64``)
tensor of shape ``(*S, 2)``: real parts in ``[..., 0]``, imaginary parts in
``[..., 1]``, the layout of ONNX ``DFT``. Graph inputs and outputs, constants,
control-flow carries and function boundaries all hold that form; rules for
equations with complex values (``Rules.lowering(..., values="complex")``) work
on it.

Key arrays (JAX's extended dtypes, ``key<fry>``): ONNX has no key type: a key
array is stored as its key data, what ``jax.random.key_data`` gives (uint32
with the key shape appended). The core maps key avals, constants and graph
inputs/outputs with `physical`; rules of key primitives (``random_bits`` ...)
work on the key data.

Besides those primitives, JAX lets only layout operations touch key arrays
(reshape, slice, gather, select ...). Their rules are written for the logical
shape, so an equation of one of them on key arrays is lowered as the same
operation on the key data, built by ``jax.vmap`` over the trailing key axis:
:func:`on_key_data`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Layout primitives JAX accepts key arrays in: each output element is one input element
# (or a fill value), so applying the primitive to each plane of the key data is exact.
_LAYOUT = frozenset(
    "broadcast_in_dim concatenate dynamic_slice dynamic_update_slice expand_dims gather pad "
    "reshape rev scatter select_n slice split squeeze stack transpose".split()
)


_PARTS = {
    np.dtype(np.complex64): np.dtype(np.float32),
    np.dtype(np.complex128): np.dtype(np.float64),
}


def is_extended(dtype: Any) -> bool:
    """Whether ``dtype`` is a JAX extended dtype (a key array's ``key<fry>``).

    Such a dtype has no NumPy or ONNX type: the graph stores the key data
    (`stored_type`).
    """
    if dtype is None or isinstance(dtype, np.dtype):
        return False
    import jax

    return jax.dtypes.issubdtype(dtype, jax.dtypes.extended)


def is_complex(dtype: Any) -> bool:
    """A complex dtype (``complex64``, ``complex128``)."""
    return isinstance(dtype, np.dtype) and dtype.kind == "c"


def touches_complex(eqn: Any) -> bool:
    """Whether a jaxpr equation has a complex input or output."""
    return any(is_complex(getattr(v.aval, "dtype", None)) for v in (*eqn.invars, *eqn.outvars))


def physical(dtype: Any, shape: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(dtype, shape)`` of the tensor that stores an array of ``dtype`` and ``shape``.

    A key array is stored as its key data: ``key<fry>[3]`` -> ``uint32[3, 2]``;
    a complex array as real and imaginary parts on a trailing axis:
    ``complex64[3]`` -> ``float32[3, 2]``. Other dtypes are unchanged.

    Example:
        ```python
        import numpy as np
        from jax2onnx.plugin import stored_type

        assert stored_type(np.dtype(np.complex64), (3,)) == (np.float32, (3, 2))
        ```
    """
    if is_complex(dtype):
        return _PARTS[dtype], (*shape, 2)
    if not is_extended(dtype):
        return dtype, tuple(shape)
    from jax._src import core as jax_core

    element = jax_core.physical_element_aval(dtype)
    return element.dtype, (*shape, *element.shape)


def complex_parts(array: np.ndarray) -> np.ndarray:
    """A complex array as stored: its real and imaginary parts on a trailing axis of 2."""
    array = np.asarray(array)
    return np.stack([array.real, array.imag], axis=-1).astype(_PARTS[array.dtype])


def from_parts(array: np.ndarray, dtype: Any) -> np.ndarray:
    """The complex array of ``dtype`` a stored ``[..., 2]`` float array holds.

    The inverse of `stored_array` for complex values: reads an exported
    model's output back. Infinities survive (``re + 1j * im`` would make NaNs).

    Args:
        array: real parts in ``[..., 0]``, imaginary parts in ``[..., 1]``.
        dtype: ``complex64`` or ``complex128``.
    """
    array = np.asarray(array)
    result = np.empty(array.shape[:-1], dtype)
    result.real, result.imag = array[..., 0], array[..., 1]  # re + 1j*im makes inf*1j NaN
    return result


def on_key_data(eqn: Any) -> tuple[Any, list[Any]] | None:
    """For a layout equation on key arrays, the same primitive on their key data: a
    function and the specs of the equation's inputs as stored, to trace; ``None`` for
    any other equation."""
    if eqn.primitive.name not in _LAYOUT:
        return None
    if not eqn.outvars or not all(is_extended(v.aval.dtype) for v in eqn.outvars):
        return None  # no key result: the primitive's own rule
    import jax
    from jax._src import core as jax_core

    def bind(*planes):
        out = eqn.primitive.bind(*planes, **eqn.params)
        return out if eqn.primitive.multiple_results else [out]

    # one vmap per trailing axis of the key data; operands that are not keys stay whole
    in_axes = tuple(-1 if is_extended(v.aval.dtype) else None for v in eqn.invars)
    key_rank = len(jax_core.physical_element_aval(eqn.outvars[0].aval.dtype).shape)
    fn = bind
    for _ in range(key_rank):
        fn = jax.vmap(fn, in_axes=in_axes, out_axes=-1)
    specs = [
        jax.ShapeDtypeStruct(*reversed(physical(v.aval.dtype, v.aval.shape))) for v in eqn.invars
    ]
    return fn, specs
