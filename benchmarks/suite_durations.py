"""Where the test suite's seconds go, from one run's ``--jax2onnx-timings`` file.

    python -m pytest -n 2 --jax2onnx-timings=timings.jsonl
    python benchmarks/suite_durations.py timings.jsonl
    python benchmarks/suite_durations.py before.jsonl after.jsonl   # side by side

The testkit's pytest plugin writes one JSON line per test phase (setup, call,
teardown: seconds, outcome, start time, xdist worker) and, for every
``check_case``, one line of its phases (see ``jax2onnx_testkit.timing``). This
script prints Markdown tables: the run per group of tests (plugin cases by
precision and static/dynamic, the opset matrix, docs pages, the site build,
the other test modules), the check phases summed over all cases (conversion
steps, checker, JAX reference with its compile time, ONNX Runtime session and
run), each worker's busy time and end, and the slowest tests.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

_CASE = re.compile(
    r"::test_case\[(?P<plugin>[^/\]]+)/(?P<component>[^/]+)/.*\[(?P<variant>[\w-]+)\](?P<at>@opset\d+)?\]$"
)


def group_of(nodeid: str) -> str:
    """The row a test counts in: ``lax f32-static``, ``opset matrix``, ``docs pages``, a file."""
    path, _, name = nodeid.partition("::")
    if path.endswith("test_opset_matrix.py") and name.startswith("test_case_at_opset"):
        return "opset matrix (cases at 13/17/21/26)"
    if path.endswith("tests/test_docs.py") and name.startswith("test_page_code_blocks_run"):
        return "docs pages (a process each)"
    match = _CASE.search(nodeid)
    if match:
        return f"cases: {match['plugin']} {match['variant']}"
    return path


def load(path: Path) -> tuple[dict[str, dict], dict[str, dict[str, float]]]:
    """Per test: its summed seconds, outcome, worker, start, end; and its check phases."""
    tests: dict[str, dict] = {}
    phases: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "phases" in record:
            into = phases.setdefault(record["id"], {})
            for key, seconds in record["phases"].items():
                into[key] = into.get(key, 0.0) + seconds
            continue
        test = tests.setdefault(
            record["id"],
            {"seconds": 0.0, "outcome": "passed", "worker": record["worker"], "start": None},
        )
        test["seconds"] += record["seconds"]
        start = record["start"]
        test["start"] = start if test["start"] is None else min(test["start"], start)
        test["end"] = max(test.get("end", 0.0), start + record["seconds"])
        failed = record["outcome"] != "passed"
        if failed and (record["when"] == "call" or test["outcome"] == "passed"):
            test["outcome"] = record["outcome"]
    return tests, phases


def _table(header: list[str], rows: list[list[str]]) -> str:
    rule = "|".join("---:" if i else "---" for i in range(len(header)))
    lines = ["| " + " | ".join(header) + " |", f"|{rule}|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def groups_table(runs: list[tuple[str, dict[str, dict]]]) -> str:
    totals = []
    for _, tests in runs:
        by = collections.defaultdict(lambda: [0, 0.0])
        for nodeid, test in tests.items():
            row = by[group_of(nodeid)]
            row[0] += 1
            row[1] += test["seconds"]
        totals.append(by)
    names = sorted(set().union(*totals), key=lambda g: -max(t.get(g, [0, 0.0])[1] for t in totals))
    header = ["group"]
    for label, _ in runs:
        header += [f"tests ({label})", f"test-seconds ({label})", "share"]
    rows = []
    for name in names:
        row = [name]
        for by, (_, tests) in zip(totals, runs, strict=True):
            all_seconds = sum(t["seconds"] for t in tests.values()) or 1.0
            count, seconds = by.get(name, [0, 0.0])
            row += [str(count), f"{seconds:.0f}", f"{100 * seconds / all_seconds:.1f}%"]
        rows.append(row)
    row = ["**all**"]
    for _, tests in runs:
        row += [str(len(tests)), f"{sum(t['seconds'] for t in tests.values()):.0f}", "100%"]
    rows.append(row)
    return _table(header, rows)


PHASES = [
    ("case", "building the case (example models, weights)"),
    ("convert.plugins", "convert: plugins and registry"),
    ("convert.prepare", "convert: prepare (modules to functions)"),
    ("convert.trace", "convert: trace (make_jaxpr)"),
    ("convert.lower", "convert: lower"),
    ("convert.passes", "convert: passes"),
    ("convert.serialize", "convert: serialise"),
    ("checker", "onnx.checker (full)"),
    ("jax", "JAX reference"),
    ("jax.op_by_op", "JAX reference: of which op by op (half precision, fallbacks)"),
    ("ort_session", "ONNX Runtime session build"),
    ("ort_run", "ONNX Runtime run"),
]


_TOP_PHASES = ("case", "convert", "checker", "jax", "ort_session", "ort_run")


def phases_table(runs: list[tuple[str, dict[str, dict], dict[str, dict[str, float]]]]) -> str:
    header = ["phase"]
    for label, *_ in runs:
        header += [f"seconds ({label})", "of which JAX compiles", "share of case time"]
    rows = []
    sums = []
    for _, tests, phases in runs:
        case_seconds = sum(tests[i]["seconds"] for i in phases if i in tests) or 1.0
        summed = collections.Counter()
        for times in phases.values():
            summed.update(times)
        sums.append((summed, case_seconds))
    for key, label in PHASES:
        row = [label]
        for summed, case_seconds in sums:
            compiled = summed.get(f"{key}.compile")
            if key.startswith("convert."):
                compiled = None  # the compile meter times the whole conversion
            row += [
                f"{summed.get(key, 0.0):.0f}",
                "" if compiled is None else f"{compiled:.0f}",
                f"{100 * summed.get(key, 0.0) / case_seconds:.1f}%",
            ]
        rows.append(row)
    row = ["convert: JAX compiles inside the conversion"]
    for summed, _ in sums:
        row += ["", f"{summed.get('convert.compile', 0.0):.0f}", ""]
    rows.append(row)
    row = ["the rest (inputs, compare, expect_graph, fixtures, pytest)"]
    for summed, case_seconds in sums:
        rest = case_seconds - sum(summed.get(k, 0.0) for k in _TOP_PHASES)
        row += [f"{rest:.0f}", "", f"{100 * rest / case_seconds:.1f}%"]
    rows.append(row)
    row = ["**all case tests**"]
    for _, case_seconds in sums:
        row += [f"{case_seconds:.0f}", "", "100%"]
    rows.append(row)
    return _table(header, rows)


def workers_table(tests: dict[str, dict]) -> str:
    by = collections.defaultdict(list)
    for test in tests.values():
        by[test["worker"]].append(test)
    begin = min(t["start"] for t in tests.values())
    rows = []
    for worker in sorted(by):
        items = by[worker]
        rows.append(
            [
                worker,
                str(len(items)),
                f"{sum(t['seconds'] for t in items):.0f}",
                f"{min(t['start'] for t in items) - begin:.0f}",
                f"{max(t['end'] for t in items) - begin:.0f}",
            ]
        )
    return _table(["worker", "tests", "busy seconds", "first start", "last end"], rows)


def slowest_table(tests: dict[str, dict], n: int) -> str:
    top = sorted(tests.items(), key=lambda kv: -kv[1]["seconds"])[:n]
    return _table(["test", "seconds"], [[f"`{i}`", f"{t['seconds']:.1f}"] for i, t in top])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="--jax2onnx-timings files")
    parser.add_argument("--slowest", type=int, default=25, help="how many slowest tests to list")
    args = parser.parse_args()
    runs = [(path.stem, *load(path)) for path in args.files]
    print("## Tests by group\n")
    print(groups_table([(label, tests) for label, tests, _ in runs]))
    print("\n## Check phases, summed over the case tests\n")
    print(phases_table(runs))
    for label, tests, _ in runs:
        outcomes = collections.Counter(t["outcome"] for t in tests.values())
        print(f"\n## {label}: workers ({dict(outcomes)})\n")
        print(workers_table(tests))
        print(f"\n## {label}: the {args.slowest} slowest tests\n")
        print(slowest_table(tests, args.slowest))


if __name__ == "__main__":
    main()
