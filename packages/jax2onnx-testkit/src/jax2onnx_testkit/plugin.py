"""jax2onnx-testkit as a jax2onnx plugin: the ``jax2onnx coverage`` command.

It lowers nothing; it adds a subcommand through the ``jax2onnx_commands``
hook, the way any plugin extends the command line.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from jax2onnx.plugin import hookimpl


def cmd_coverage(args: argparse.Namespace, out: TextIO) -> int:
    """``jax2onnx coverage``: print the coverage table (see `coverage` and `render`)."""
    import pathlib

    from jax2onnx_testkit.coverage import coverage, render, update

    if args.update:
        path = pathlib.Path(args.update)
        rows = update(path, args.plugin or None, args.primitive or ())
        path.write_text(render(rows, markdown=True))
        return 0
    if args.primitive:
        raise SystemExit("jax2onnx coverage: --primitive goes with --update FILE")
    out.write(render(coverage(args.plugin or None), markdown=args.markdown))
    return 0


@hookimpl
def jax2onnx_commands(commands: Any) -> None:
    """Add the ``coverage`` subcommand (``--plugin NAME``, repeatable; ``--markdown``;
    ``--update FILE`` with ``--primitive NAME``, repeatable)."""
    cover = commands.add_parser(
        "coverage",
        help="each lowered primitive with its ONNX ops, dtypes and case count",
        description="Converts every case once to see which ONNX ops each rule emits.",
    )
    cover.add_argument("--plugin", action="append", help="only this plugin (repeatable)")
    cover.add_argument("--markdown", action="store_true", help="the docs/coverage.md form")
    cover.add_argument(
        "--update",
        metavar="FILE",
        help="rewrite this --markdown table in place, converting only the rows whose "
        "declaration changed and those named with --primitive",
    )
    cover.add_argument(
        "--primitive",
        action="append",
        help="with --update: convert this primitive's row too (repeatable); for a rule "
        "whose ops changed while its cases did not",
    )
    cover.set_defaults(run=cmd_coverage)
