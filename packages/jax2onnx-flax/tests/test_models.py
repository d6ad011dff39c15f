"""Properties of exporting the example models that the case format cannot state.

Converting must leave the user's module exactly as it was (parameters, BatchNorm
statistics, RNG counts and keys, training-mode flags), the export computes the
inference-mode model even when the module is left in training mode, and the
parameter arrays become initializers without copies.
"""

from __future__ import annotations

import subprocess
import sys

import jax
import numpy as np
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx_flax import models

nnx = pytest.importorskip("flax.nnx")


def _snapshot(module) -> dict:
    """Every state leaf by path, as NumPy (RNG keys as their key data)."""
    flat = {}
    for path, variable in nnx.to_flat_state(nnx.state(module)):
        value = variable[...]
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        flat[path] = np.array(value)
    return flat


def _flags(module) -> dict:
    """``deterministic`` / ``use_running_average`` of every submodule that has them."""
    flags = {}
    for path, sub in nnx.iter_graph(module):
        for name in ("deterministic", "use_running_average"):
            if isinstance(sub, nnx.Module) and hasattr(sub, name):
                flags[(path, name)] = getattr(sub, name)
    return flags


def _trained_mlp():
    model = models.mlp()
    x = np.random.default_rng(0).standard_normal((8, 30)).astype(np.float32)
    model(x)  # training mode: BatchNorm statistics move, Dropout draws
    return model


def _trained_gpt2():
    model = models.gpt2()
    ids = np.random.default_rng(0).integers(0, models.GPTConfig().vocab, (2, 8)).astype(np.int32)
    model(ids)
    return model


@pytest.mark.parametrize(
    "make, spec",
    [
        (_trained_mlp, [("B", 30)]),
        (_trained_gpt2, [jax.ShapeDtypeStruct((2, 8), np.int32)]),
    ],
    ids=["mlp", "gpt2"],
)
def test_conversion_leaves_module_unchanged(make, spec):
    model = make()
    before, flags = _snapshot(model), _flags(model)
    graphdef = nnx.graphdef(model)
    assert any(path[-1] == "count" for path in before), "expected RNG counts in the state"
    assert any(not value for value in flags.values()), "the module should be in training mode"
    to_onnx(model, spec)
    after = _snapshot(model)
    assert after.keys() == before.keys()
    changed = [p for p in before if not np.array_equal(before[p], after[p])]
    assert not changed, f"conversion changed {changed}"
    assert _flags(model) == flags
    assert nnx.graphdef(model) == graphdef


def test_training_mode_exports_inference_model():
    """Compared with an inference copy made here, not with the testkit's reference."""
    model = _trained_mlp()
    exported = to_onnx(model, [("B", 30)])
    reference = nnx.clone(model)
    reference.eval()
    x = np.random.default_rng(1).standard_normal((5, 30)).astype(np.float32)
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, np.asarray(reference(x)), rtol=1e-5, atol=1e-5)
    # In training mode the same input gives other numbers (batch statistics, dropout).
    assert not np.allclose(got, np.asarray(model(x)), rtol=1e-3, atol=1e-3)


def _initializers(ir_model) -> list[np.ndarray]:
    return [v.const_value.numpy() for v in ir_model.graph.initializers.values()]


def test_linear_kernels_are_referenced_not_copied():
    """A kernel is the model's array itself; the one a BatchNorm folds into is replaced by
    the folded product, and the original is not kept besides it."""
    model = models.mlp()
    model.eval()
    arrays = _initializers(to_onnx(model, [("B", 30)], return_mode="ir"))
    kernel = np.asarray(model.linear2.kernel[...])
    assert any(np.shares_memory(kernel, a) for a in arrays), "kernel copied"
    folded = np.asarray(model.linear1.kernel[...])  # linear1 feeds the BatchNorm
    assert not any(np.shares_memory(folded, a) for a in arrays)
    assert sum(a.shape == folded.shape for a in arrays) == 1


def test_tied_embedding_is_one_initializer():
    """``Embed`` lookups and ``Embed.attend`` use the one table, not a transposed copy."""
    model = models.gpt2()
    model.eval()
    table = np.asarray(model.wte.embedding[...])
    spec = [jax.ShapeDtypeStruct((2, 8), np.int32)]
    arrays = _initializers(to_onnx(model, spec, return_mode="ir"))
    assert sum(np.shares_memory(table, a) for a in arrays) == 1
    assert not any(a.shape == table.T.shape and np.array_equal(a, table.T) for a in arrays)


def test_models_import_without_flax():
    """Building the cases (the testkit, ``jax2onnx plugins``) imports them: not Flax."""
    code = (
        "import sys, jax2onnx_flax.model_cases as m; "
        "assert m.models.ViTConfig.base16().tokens == 197; "
        "assert 'flax' not in sys.modules, 'flax imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_full_size_configs():
    gpt = models.GPTConfig.gpt2_small()
    assert (gpt.depth, gpt.dim, gpt.heads, gpt.vocab) == (12, 768, 12, 50257)
    vit = models.ViTConfig.base16()
    assert (vit.image, vit.patch, vit.dim, vit.depth, vit.heads) == (224, 16, 768, 12, 12)
