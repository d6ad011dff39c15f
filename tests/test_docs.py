"""The docs say what the code does: every lowered primitive is in the coverage table."""

import pathlib

import jax2onnx

ROOT = pathlib.Path(__file__).resolve().parents[1]
OURS = {"core", "lax", "nn", "flax", "equinox"}


def test_coverage_table_lists_every_lowered_primitive():
    table = (ROOT / "docs" / "coverage.md").read_text()
    missing = [
        f"{p.name}/{lw.primitive}"
        for p in jax2onnx.plugins().plugins
        if p.name in OURS and p.rules is not None
        for lw in p.rules.lowerings
        if f"`{lw.primitive}" not in table and f" {lw.primitive}`" not in table
        and f", {lw.primitive}" not in table
    ]
    assert not missing, (
        f"docs/coverage.md misses {missing}; regenerate it with "
        "`jax2onnx coverage --plugin core --plugin lax --plugin nn --plugin flax "
        "--plugin equinox --markdown > docs/coverage.md`"
    )
