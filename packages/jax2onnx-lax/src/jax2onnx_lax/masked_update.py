"""``x.at[mask].set(v)`` and the other ``.at`` updates with a traced boolean mask.

JAX refuses these while tracing (``NonConcreteBooleanIndexError``): it turns a
mask into the indices of its true entries, whose number depends on the data.
Where every selected element receives the same value the update needs no
such indices: it is JAX's update applied everywhere, kept where the mask is
true (``jnp.where(mask, x.at[...].set(v), x)``). So while ``to_onnx`` traces,
``jax._src.ops.scatter._scatter_update`` (behind ``x.at[idx].set``, ``add``,
``subtract``, ``multiply``, ``divide``, ``power``, ``min``, ``max`` and
``apply``) is intercepted for an index holding a traced boolean mask:

* the index is the mask alone, or the mask among full slices (``:``) and one
  ``...``: ``x.at[m]``, ``x.at[:, m]``, ``x.at[..., m]``; the mask covers as
  many axes of ``x`` as it has, with their sizes;
* the values have no axis along the selected elements (size 1 there, or
  fewer axes): a scalar, or a row given to every selected row.

Any other update with a traced mask (two masks, a mask with integer indices,
one value per selected element as in ``x.at[m].set(y[m])``) raises a
``UsageError`` naming the user's line and what to write instead. Gradients
flow as through ``jnp.where``; inside ``jax.vmap`` the mask is batched like
any other operand.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, UsageError, case, user_line

family = Family("lax")

_WHERE_HINT = (
    "Write the update as jnp.where(mask, new_values, x), with new_values broadcast to "
    "x's shape (e.g. jnp.where(m, y, x) for x.at[m].set(y[m]), jnp.where(m, x + y, x) for "
    "x.at[m].add(y[m])), or give the indices a static count: "
    "x.at[jnp.nonzero(m, size=n, fill_value=len(x))].set(v, mode='drop')."
)


def _traced_mask(entry: Any) -> bool:
    return (
        isinstance(entry, jax.core.Tracer)
        and entry.dtype == np.bool_
        and entry.ndim >= 1  # a traced bool scalar is JAX's own (a size-0/1 axis)
    )


def _entries(idx: Any) -> tuple[Any, ...]:
    return idx if isinstance(idx, tuple) else (idx,)


def _has_traced_mask(args: dict[str, Any]) -> bool:
    return any(_traced_mask(e) for e in _entries(args["idx"]))


def _is_full_slice(entry: Any) -> bool:
    return isinstance(entry, slice) and all(
        part is None for part in (entry.start, entry.stop, entry.step)
    )


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # symbolic dimensions JAX cannot compare
        return False


def _refuse(problem: str) -> UsageError:
    where = user_line() or "an unknown line"
    return UsageError(
        f"x.at[...] update with a traced boolean mask at {where}: {problem}. JAX "
        "cannot trace it (the number of selected elements depends on the data) and "
        f"jax2onnx converts only a mask whose selected elements all get one value. {_WHERE_HINT}"
    )


def _mask_axis(x: Any, entries: tuple[Any, ...]) -> tuple[int, Any]:
    """``(first axis the mask covers, the mask)``, or a UsageError for other indices."""
    masks = [e for e in entries if _traced_mask(e)]
    if len(masks) > 1:
        raise _refuse(f"the index holds {len(masks)} boolean masks")
    for e in entries:
        if not (_traced_mask(e) or _is_full_slice(e) or e is Ellipsis):
            raise _refuse(
                f"the index mixes the mask with {e!r} (only full slices ':' and one '...' "
                "may accompany it)"
            )
    ellipses = sum(e is Ellipsis for e in entries)
    if ellipses > 1:
        raise _refuse("the index holds more than one '...'")
    mask = masks[0]
    spread = x.ndim - (len(entries) - 1 - ellipses) - mask.ndim  # the axes '...' stands for
    if spread < 0:
        raise _refuse(f"the index has more axes than x ({x.ndim})")
    axis = 0
    for e in entries:
        if e is mask:
            break
        axis += spread if e is Ellipsis else 1
    covered = x.shape[axis : axis + mask.ndim]
    if not all(_same(a, b) for a, b in zip(mask.shape, covered, strict=True)):
        raise _refuse(
            f"the mask's shape {tuple(mask.shape)} is not that of the axes it covers, "
            f"{tuple(covered)}"
        )
    return axis, mask


def _values_everywhere(y: Any, x: Any, axis: int, k: int) -> Any:
    """The values ``y`` (for ``x[mask]``, which has ``x.ndim - k + 1`` axes, the selected
    elements' at ``axis``) reshaped to broadcast over the whole of ``x``; a UsageError when
    they hold one entry per selected element."""
    if np.ndim(y) == 0:
        return y  # as given: JAX's update keeps a Python scalar's weak type
    y = jnp.asarray(y)
    rank = x.ndim - k + 1
    if y.ndim > rank:
        raise _refuse(
            f"the values have {y.ndim} axes, more than the {rank} of the selection x[mask]"
        )
    shape = (1,) * (rank - y.ndim) + tuple(y.shape)
    if not _same(shape[axis], 1):
        raise _refuse(
            f"the values {tuple(y.shape)} hold one entry per selected element (axis "
            f"{axis - (rank - y.ndim)} of the values)"
        )
    return y.reshape((*shape[:axis], *(1,) * k, *shape[axis + 1 :]))


def _applied(scatter_op: Any) -> Any:
    """The function of ``x.at[idx].apply(func)`` (JAX's ``_scatter_apply`` closes over it),
    None for the other updates; a UsageError if JAX's helper no longer holds it."""
    if getattr(scatter_op, "__name__", None) != "_scatter_apply":
        return None
    func = inspect.getclosurevars(scatter_op).nonlocals.get("func")
    if not callable(func):
        raise _refuse("x.at[mask].apply(f) with this JAX version; write jnp.where(mask, f(x), x)")
    return func


def _update_binder(original: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def update(*args: Any, **kwargs: Any) -> Any:
        named = signature.bind(*args, **kwargs).arguments
        x = jnp.asarray(named["x"])
        axis, mask = _mask_axis(x, _entries(named["idx"]))
        func = _applied(named["scatter_op"])
        if func is not None:  # x.at[mask].apply(func): func of each element
            everywhere = jax.vmap(func)(x.reshape(-1)).reshape(x.shape).astype(x.dtype)
        else:  # the update of every element
            named["y"] = _values_everywhere(named["y"], x, axis, mask.ndim)
            named["x"], named["idx"] = x, Ellipsis
            everywhere = original(**named)
        keep = lax.broadcast_in_dim(mask, x.shape, tuple(range(axis, axis + mask.ndim)))
        return jnp.where(keep, everywhere, x)

    return update


family.intercept(
    "jax._src.ops.scatter._scatter_update",  # x.at[idx].set / add / min / apply ... call it
    None,
    binder=_update_binder,
    accept=_has_traced_mask,
)


# -- cases --------------------------------------------------------------------------

_B = np.bool_


def _at(x):
    return jnp.asarray(x).at  # the reference runs on NumPy arrays


def _cases():
    f32 = np.float32
    return [
        case(
            "set_scalar",
            lambda x, m: _at(x)[m].set(0.0),
            [("B", 4), ("B", 4)],
            dtypes=[f32, _B],
            expect=["Where:Bx4"],
            counts={"NonZero": 0},
        ),
        case(
            "set_traced_scalar",
            lambda x, m, v: _at(x)[m].set(v),
            [(6,), (6,), ()],
            dtypes=[f32, _B, f32],
            expect=["Where:6"],
        ),
        case("add", lambda x, m: _at(x)[m].add(2.5), [(3, 4), (3, 4)], dtypes=[f32, _B]),
        case("subtract", lambda x, m: _at(x)[m].subtract(1.5), [(5,), (5,)], dtypes=[f32, _B]),
        case("multiply", lambda x, m: _at(x)[m].multiply(-3.0), [(5,), (5,)], dtypes=[f32, _B]),
        case("divide", lambda x, m: _at(x)[m].divide(4.0), [(5,), (5,)], dtypes=[f32, _B]),
        case(
            "power",
            lambda x, m: _at(x)[m].power(2.0),
            [(5,), (5,)],
            dtypes=[f32, _B],
        ),
        case("min", lambda x, m: _at(x)[m].min(0.25), [(2, 5), (2, 5)], dtypes=[f32, _B]),
        case("max", lambda x, m: _at(x)[m].max(0.25), [(2, 5), (2, 5)], dtypes=[f32, _B]),
        case("apply", lambda x, m: _at(x)[m].apply(jnp.sin), [(7,), (7,)], dtypes=[f32, _B]),
        case(
            "apply_int",
            lambda x, m: _at(x)[m].apply(lambda v: v * 3 + 1),
            [("B", 2), ("B", 2)],
            dtypes=[np.int32, _B],
        ),
        case(
            "rows",  # a mask over the leading axis, one row of values for every selected row
            lambda x, m, v: _at(x)[m].set(v),
            [("B", 3), ("B",), (3,)],
            dtypes=[f32, _B, f32],
        ),
        case(
            "leading_two_axes",
            lambda x, m, v: _at(x)[m].add(v),
            [(2, 3, 4), (2, 3), (1, 4)],
            dtypes=[f32, _B, f32],
        ),
        case(
            "columns",
            lambda x, m, v: _at(x)[:, m].set(v),
            [("B", 5), (5,), ("B", 1)],
            dtypes=[f32, _B, f32],
        ),
        case(
            "ellipsis",
            lambda x, m: _at(x)[..., m].multiply(2.0),
            [(2, 3, 4), (4,)],
            dtypes=[f32, _B],
        ),
        case(
            "int_values",
            lambda x, m: _at(x)[m].set(7),
            [(6,), (6,)],
            dtypes=[np.int32, _B],
        ),
        case("from_data", lambda x: _at(x)[x > 0].set(0.0), [("B", 3)], expect=["Greater"]),
        case(
            "grad",
            jax.grad(lambda x, v: jnp.sum(_at(x)[x > 0].set(v) ** 2), argnums=(0, 1)),
            [(6,), ()],
        ),
        case(
            "concrete_mask",  # a mask known at conversion time stays JAX's own scatter
            lambda x: _at(x)[np.array([True, False, True])].set(1.0),
            [(3,)],
            counts={"Where": 0},
        ),
    ]


family.add_cases("numpy.at_mask", _cases)

register = family.register
