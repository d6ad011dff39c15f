"""The coverage table reports the ops each rule really emitted."""

from jax2onnx_testkit.coverage import coverage, render


def test_rows_carry_emitted_ops_dtypes_and_cases():
    # the example third-party plugin: a table built the way `jax2onnx coverage` builds
    # the project's, from a dozen cases instead of the lax plugin's thousands
    rows = {r.primitive: r for r in coverage(["myops"])}
    assert rows["myops.swish_gate"].ops == {"Mul", "Sigmoid"}
    assert {"Abs", "Div"} <= rows["myops.softclip"].ops
    assert {"float32", "float64"} <= rows["myops.softclip"].dtypes
    assert rows["myops.softclip"].cases >= 1
    assert not any(r.errors for r in rows.values())


def test_a_case_marked_xfail_that_fails_to_convert_is_a_listed_gap(monkeypatch):
    import types

    from jax.extend.core import Primitive

    import jax2onnx
    from jax2onnx.plugin import Rules, case

    unlowered_p = Primitive("unlowered_for_coverage")
    unlowered_p.def_abstract_eval(lambda x: x)
    rules = Rules("gaps")
    rules.add_cases(
        "tanh",
        [case("no_rule", lambda x: unlowered_p.bind(x), [(3,)], xfail="no lowering yet")],
    )
    plugin = types.SimpleNamespace(name="gaps", rules=rules)
    monkeypatch.setattr(jax2onnx, "plugins", lambda: types.SimpleNamespace(plugins=[plugin]))
    (row,) = coverage(["gaps"])
    assert row.known_gaps == ["no_rule"] and row.cases == 1 and not row.errors
    assert "[known gap, xfail: no_rule]" in render([row], markdown=True)


def test_aliases_share_a_row_and_markdown_has_a_table():
    rows = coverage(["core"])
    assert "jit, pjit" in [r.primitive for r in rows]
    text = render(rows, markdown=True)
    assert text.startswith("# Coverage")
    assert "| core | `jit, pjit` |" in text


def test_update_converts_only_the_changed_and_the_named_rows(tmp_path):
    from jax2onnx_testkit.coverage import read_table, update

    table = tmp_path / "coverage.md"
    table.write_text(render(coverage(["myops"]), markdown=True))
    committed = read_table(table)
    gate = committed["myops", "myops.swish_gate"]
    clip = committed["myops", "myops.softclip"]
    # an edited ops cell stands for a row converted by an older release; a wrong
    # case count for a declaration that changed since
    lines = table.read_text().replace(f"| {gate[2]} |", "| Stale |")
    table.write_text(
        lines.replace(
            f"| {clip[2]} | {clip[3]} | {clip[4]} | {clip[5]} | {clip[6]} |",
            f"| Stale | {clip[3]} | {clip[4]} | {clip[5]} | 99 |",
        )
    )
    rows = {r.primitive: r for r in update(table, ["myops"])}
    assert rows["myops.swish_gate"].kept_ops == "Stale"  # declaration unchanged: kept
    assert rows["myops.softclip"].kept_ops is None and {"Abs", "Div"} <= rows["myops.softclip"].ops
    rows = {r.primitive: r for r in update(table, ["myops"], ["myops.swish_gate"])}
    assert (
        rows["myops.swish_gate"].ops == {"Mul", "Sigmoid"}
        and rows["myops.swish_gate"].kept_ops is None
    )
