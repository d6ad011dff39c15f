"""Every plugin's cases work at every supported opset: a sampled matrix at 13, 17, 21 and 26.

Each case is written for one opset (23 unless it says otherwise). Here a fixed
sample of the cases of our plugins is converted again for other opsets and
checked for numbers (full ONNX checker, ONNX Runtime against JAX); the graph
expectations are skipped, as they describe the graph at the case's own opset.
The sample is chosen by a hash of the case id, round robin over the
plugins, so it is the same on every run and reaches every plugin.
``JAX2ONNX_OPSET_SAMPLE`` sets how many cases run per opset (default 40;
``all`` for every case).
"""

from __future__ import annotations

import os
import zlib

import pytest

from jax2onnx_testkit.pytest_plugin import collect_variants

OPSETS = (13, 17, 21, 26)
PLUGINS = ["core", "lax", "nn", "flax", "equinox"]


def _sample(opset: int) -> list:
    wanted = os.environ.get("JAX2ONNX_OPSET_SAMPLE", "40")
    variants = [
        v
        for v in collect_variants(PLUGINS)
        if not v.case.skip
        and not v.case.xfail
        and (
            v.case.opset is None or v.case.opset <= opset
        )  # one written for a newer opset needs it
        and v.precision == "f32"
    ]
    variants.sort(key=lambda v: zlib.crc32(f"{v.id}@{opset}".encode()))
    if wanted != "all":
        # round robin over the plugins, so a small sample still reaches each of them
        by_plugin: dict[str, list] = {}
        for v in variants:
            by_plugin.setdefault(v.plugin, []).append(v)
        queues = [by_plugin[p] for p in sorted(by_plugin)]
        picked: list = []
        while len(picked) < int(wanted) and any(queues):
            for queue in queues:
                if queue and len(picked) < int(wanted):
                    picked.append(queue.pop(0))
        variants = picked
    return [v.at_opset(opset) for v in variants]


def pytest_generate_tests(metafunc):
    if "variant" in metafunc.fixturenames:
        params = [v for opset in OPSETS for v in _sample(opset)]
        metafunc.parametrize("variant", params, ids=[v.id for v in params])


@pytest.mark.full_suite
def test_case_at_opset(variant, check_case):
    check_case(variant)


def test_the_matrix_samples_every_opset_and_several_plugins():
    for opset in OPSETS:
        sample = _sample(opset)
        assert len(sample) > 0
        assert {v.plugin for v in sample} >= {"core", "lax", "nn", "flax"}, opset


@pytest.mark.parametrize("opset", [9, 12])
def test_opsets_below_13_are_refused_clearly(opset):
    import jax.numpy as jnp

    from jax2onnx import to_onnx

    with pytest.raises(ValueError, match=rf"opset {opset} is not supported; choose 13\.\.26"):
        to_onnx(lambda x: jnp.sin(x), [(3,)], opset=opset)
