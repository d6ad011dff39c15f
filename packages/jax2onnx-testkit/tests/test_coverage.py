"""The coverage table reports the ops each rule really emitted."""

from jax2onnx_testkit.coverage import coverage, render


def test_rows_carry_emitted_ops_dtypes_and_cases():
    rows = {r.primitive: r for r in coverage(["lax"])}
    assert rows["tanh"].ops == {"Tanh"}
    assert {"Equal", "Not"} <= rows["ne"].ops
    assert {"float32", "float64"} <= rows["tanh"].dtypes
    assert rows["tanh"].cases >= 1
    assert not any(r.errors for r in rows.values())
    # complex FFTs are a documented gap (strict xfail cases): listed, not hidden
    assert "rfft_abs" in rows["fft"].known_gaps


def test_aliases_share_a_row_and_markdown_has_a_table():
    rows = coverage(["core"])
    assert "jit, pjit" in [r.primitive for r in rows]
    text = render(rows, markdown=True)
    assert text.startswith("# Coverage")
    assert "| core | `jit, pjit` |" in text
