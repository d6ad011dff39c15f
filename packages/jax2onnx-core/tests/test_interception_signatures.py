"""Interceptions accept the whole signature of the function they stand in for.

While ``to_onnx`` traces, an intercepted attribute (``jax.numpy.clip``,
``flax.nnx.LayerNorm.__call__`` ...) calls a plugin's stand-in. A user's call
that works in JAX must work there too, and one JAX rejects must fail with
JAX's own error. So for every interception the installed plugins register:

* the stand-in shows the original's ``inspect.signature`` (tools and users
  introspecting the patched attribute see the real one), and
* the stand-in's own parameters accept exactly what the original's do: either
  it takes ``*args, **kwargs`` (after ``self`` for a method) and binds them
  with the original's signature, or its parameter list is the original's
  (names, kinds and defaults; annotations aside).

Call-level checks then convert ``jnp.clip`` and ``jnp.linspace`` in the forms
their signatures allow and compare with JAX.
"""

from __future__ import annotations

import importlib
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest

import jax2onnx
from jax2onnx.registration.interceptions import _stand_in, resolve

_P = inspect.Parameter


def _interceptions():
    registry = jax2onnx.plugins().registry()
    return [
        pytest.param(item, id=f"{item.plugin}:{item.target}") for item in registry.interceptions
    ]


def _original(target: str):
    package = target.split(".")[0]
    try:
        importlib.import_module(package)
    except ImportError:
        pytest.skip(f"{package} is not installed: nothing to intercept")
    resolved = resolve(target)
    assert resolved is not None, f"interception target {target} does not exist"
    return getattr(*resolved)


def _shape(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def _is_generic(own: inspect.Signature, original: inspect.Signature) -> bool:
    """``(*args, **kwargs)``, or ``(self, *args, **kwargs)`` for a method."""
    kinds = [p.kind for p in own.parameters.values()]
    names = list(own.parameters)
    first = next(iter(original.parameters), None)
    if kinds[:1] == [_P.POSITIONAL_OR_KEYWORD] and names[0] == first == "self":
        kinds = kinds[1:]
    return kinds == [_P.VAR_POSITIONAL, _P.VAR_KEYWORD]


@pytest.mark.parametrize("item", _interceptions())
def test_stand_in_has_the_original_signature(item):
    original = _original(item.target)
    stand_in = _stand_in(item, original)
    assert inspect.signature(stand_in) == inspect.signature(original)
    own = inspect.signature(stand_in, follow_wrapped=False)
    expected = inspect.signature(original)
    if not _is_generic(own, expected):
        assert _shape(own) == _shape(expected), (
            f"the stand-in of {item.target} takes {own}, the original {expected}"
        )


def test_every_installed_plugin_interception_is_walked():
    """The walk above is not vacuous: our plugins' interceptions are in it."""
    targets = {item.target for item in jax2onnx.plugins().registry().interceptions}
    assert {"jax.numpy.clip", "jax.numpy.linspace", "jax.nn.gelu"} <= targets


# -- call-level checks -------------------------------------------------------------


_MASK = np.array([[True, True, False, True], [True, False, True, True], [True] * 4])


@pytest.mark.parametrize("name", ["RMSNorm", "LayerNorm"])
@pytest.mark.parametrize("how", ["positional", "keyword", "none"])
def test_norm_modules_take_mask_as_flax_does(name, how):
    """``RMSNorm.__call__(x, mask=None)`` takes its mask positionally; ``LayerNorm`` not."""
    nnx = pytest.importorskip("flax.nnx")
    module = getattr(nnx, name)(4, rngs=nnx.Rngs(0))
    if how == "positional" and name == "LayerNorm":
        with pytest.raises(TypeError) as jax_error:
            module(_X, _MASK)
        with pytest.raises(TypeError) as ours:
            jax2onnx.to_onnx(lambda x: module(x, _MASK), [_X.shape])
        assert str(ours.value) == str(jax_error.value)
        return
    calls = {
        "positional": lambda x: module(x, _MASK),
        "keyword": lambda x: module(x, mask=_MASK),
        "none": lambda x: module(x),
    }
    _same(calls[how], _X)


def _converted(fn, *args):
    """``fn`` converted for ``args`` and run in ONNX Runtime (the inputs fed by name)."""
    model = jax2onnx.to_onnx(fn, [np.asarray(a) for a in args])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: np.asarray(a) for n, a in zip(names, args, strict=False)})


def _same(fn, *args):
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(fn(*args))]
    got = _converted(fn, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


_X = np.linspace(-3.0, 3.0, 12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: jnp.clip(x, -1.0, 2.0),
        lambda x: jnp.clip(x, min=-1.0, max=2.0),
        lambda x: jnp.clip(x, -1.0, max=2.0),
        lambda x: jnp.clip(x, min=0.5),
        lambda x: jnp.clip(x, max=0.5),
        lambda x: jnp.clip(x, None, 0.5),
        lambda x: jnp.clip(x, np.float32(-0.5), np.float32(1.5)),
        lambda x: jnp.clip(x, jnp.full((4,), -0.5), 1.5),
        lambda x: jnp.clip(x, max=jnp.arange(4.0)),
        lambda x: jnp.clip(x),
    ],
    ids=[
        "positional",
        "keywords",
        "mixed",
        "min_only",
        "max_only",
        "none_min",
        "numpy_scalars",
        "array_min",
        "array_max",
        "no_bounds",
    ],
)
def test_clip_forms_convert_like_jax(fn):
    _same(fn, _X)


def test_clip_with_bound_arrays_as_inputs():
    _same(lambda x, lo, hi: jnp.clip(x, lo, hi), _X, np.float32(-1.0), np.full(4, 1.0, np.float32))


def test_clip_old_keywords_fail_with_jaxs_own_error():
    """JAX 0.10 dropped ``a_min``/``a_max``; converting such a call raises JAX's TypeError."""

    def fn(x):
        return jnp.clip(x, a_min=0.0, a_max=0.5)

    with pytest.raises(TypeError) as jax_error:
        fn(_X)
    with pytest.raises(TypeError) as ours:
        jax2onnx.to_onnx(fn, [_X.shape])
    assert type(ours.value) is TypeError
    assert str(ours.value) == str(jax_error.value)
    assert "a_m" in str(ours.value)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x + jnp.linspace(0.0, 1.0, 4),
        lambda x: x + jnp.linspace(0.0, 1.0, num=4, endpoint=False),
        lambda x: x + jnp.linspace(start=-2, stop=3, num=4, dtype=jnp.float32),
        lambda x: x + jnp.linspace(0, 6, 4, True, False, jnp.int32, 0).astype(x.dtype),
        lambda x: x + jnp.linspace(0.0, 1.0, 4, retstep=True)[0],
        lambda x: x * jnp.linspace(0.0, 1.0, 4, retstep=True)[1],
        lambda x: x + jnp.linspace(jnp.zeros(3), jnp.ones(3), 4, axis=1),
        lambda x: x + jnp.linspace(jnp.zeros(4), jnp.ones(4), 3, axis=0, endpoint=False),
        lambda x: x + jnp.linspace(0.0, 1.0, 4, device=None),
        lambda x: x + jnp.linspace(x[0, 0], 1.0, 4),
    ],
    ids=[
        "positional",
        "endpoint",
        "keywords_dtype",
        "all_positional",
        "retstep_values",
        "retstep_step",
        "array_axis1",
        "array_axis0_no_endpoint",
        "device_none",
        "traced_start",
    ],
)
def test_linspace_forms_convert_like_jax(fn):
    _same(fn, _X)
