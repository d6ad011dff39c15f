"""The docs say what the code does: the coverage table, and examples that run."""

import pathlib

import pytest

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
        if f"`{lw.primitive}" not in table
        and f" {lw.primitive}`" not in table
        and f", {lw.primitive}" not in table
    ]
    assert not missing, (
        f"docs/coverage.md misses {missing}; regenerate it with "
        "`jax2onnx coverage --plugin core --plugin lax --plugin nn --plugin flax "
        "--plugin equinox --markdown > docs/coverage.md`"
    )


def _python_blocks(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


# each page with runnable examples, and the extras its examples import
PAGES = {
    "flax.md": ("flax",),
    "functions.md": ("flax",),
    "numerics.md": ("flax",),
    "equinox.md": ("equinox", "diffrax"),
}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_doc_examples_run_as_written(page):
    for module in PAGES[page]:
        pytest.importorskip(module, reason=f"the examples of {page} need {module}")
    blocks = _python_blocks(page)
    assert blocks, page
    namespace = {"__name__": "docs_example"}  # a page's blocks build on each other
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), namespace)
