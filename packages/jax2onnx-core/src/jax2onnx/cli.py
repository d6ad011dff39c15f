"""The ``jax2onnx`` command line.

``jax2onnx plugins``
    Lists the loaded plugins (distribution, version, lowerings, macro
    primitives, cases) and the plugins that failed to load.

``jax2onnx convert MODULE:ATTR --input B,30 [--input ...] -o model.onnx``
    Imports ``MODULE`` (a dotted module name, or a path to a ``.py`` file),
    takes ``ATTR`` (dotted attributes allowed), converts it with ``to_onnx``,
    runs the full ``onnx.checker`` and prints a summary.

Factory rule: ``ATTR`` is called once (with no arguments) and its result is
converted when ``--factory`` is given, or, by default, when ``ATTR`` cannot
accept the given inputs (and ``--input-param`` keywords) but can be called with
no arguments at all. ``--no-factory`` converts ``ATTR`` as it is.

Plugins add commands through the ``jax2onnx_commands`` hook (jax2onnx-testkit
adds ``jax2onnx coverage``).

Usage errors (a malformed ``--input``, an unknown module or attribute, an
argument ``to_onnx`` rejects) exit with status 2 and a one-line message;
conversion failures exit with status 1. ``--traceback`` re-raises instead.

This module never imports ONNX Runtime.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from jax2onnx.values.errors import UsageError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_HISTOGRAM_TOP = 10

# dtypes with 64-bit float parts: they need --double, without it JAX narrows them (complex64
# has float32 parts and, like float32, needs none)
_NARROWED = {"float64": "float32", "complex128": "complex64"}


@dataclasses.dataclass(frozen=True)
class _InputSpec:
    """A shape with a dtype; ``to_onnx`` accepts any object with ``.shape`` and ``.dtype``."""

    shape: tuple[Any, ...]
    dtype: Any


# -- parsing -----------------------------------------------------------------


def parse_shape(text: str) -> tuple[int | str, ...]:
    """``"B,30"`` -> ``("B", 30)``; ``""`` or ``"()"`` is a scalar."""
    body = text.strip()
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1].strip()
    if not body:
        return ()
    dims: list[int | str] = []
    for axis, part in enumerate(body.split(",")):
        part = part.strip()
        if not part:
            raise UsageError(f"--input {text!r}: axis {axis} is empty (use e.g. 'B,30')")
        try:
            value = int(part)
        except ValueError:
            dims.append(part)
            continue
        if value < 0:
            raise UsageError(f"--input {text!r}: axis {axis} has negative size {value}")
        dims.append(value)
    return tuple(dims)


def parse_param(text: str) -> tuple[str, Any]:
    """``"scale=0.5"`` -> ``("scale", 0.5)``; values are bools, ints or floats."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name.isidentifier() or not raw:
        raise UsageError(f"--input-param {text!r}: expected NAME=VALUE, e.g. scale=0.5")
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return name, lowered == "true"
    for kind in (int, float):
        try:
            return name, kind(raw)
        except ValueError:
            pass
    raise UsageError(f"--input-param {text!r}: value {raw!r} is not a bool, int or float")


def parse_dtypes(names: Sequence[str] | None, count: int) -> list[Any]:
    """One dtype per input: none given -> float32; one -> for every input; else one each."""
    import ml_dtypes  # noqa: F401  (names "bfloat16" for NumPy)
    import numpy as np

    names = list(names or [])
    if not names:
        names = ["float32"] * count
    elif len(names) == 1:
        names = names * count
    elif len(names) != count:
        raise UsageError(f"got {len(names)} --dtype for {count} --input; give one, or one each")
    dtypes = []
    for name in names:
        try:
            dtypes.append(np.dtype(name))
        except TypeError:
            raise UsageError(f"--dtype {name!r} is not a NumPy dtype name") from None
    return dtypes


def load_target(target: str) -> Any:
    """The object ``MODULE:ATTR`` names; ``MODULE`` may be a ``.py`` file path."""
    module_part, sep, attr_part = target.rpartition(":")
    if not sep or not module_part or not attr_part:
        raise UsageError(f"{target!r}: expected MODULE:ATTR, e.g. mypkg.models:make_model")
    module = _import(module_part)
    obj: Any = module
    for attr in attr_part.split("."):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            raise UsageError(f"{module_part!r} has no attribute {attr_part!r}") from None
    return obj


def _import(module_part: str) -> Any:
    is_file = module_part.endswith(".py") or os.sep in module_part or "/" in module_part
    if is_file:
        path = os.path.abspath(module_part)
        if not os.path.isfile(path):
            raise UsageError(f"no such file: {module_part}")
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)  # let the file import its siblings
        name = "_jax2onnx_cli_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot import {module_part}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # console scripts do not see the working directory
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as err:
        if err.name and module_part.startswith(err.name):
            raise UsageError(f"cannot import module {module_part!r}: {err}") from None
        raise


def _accepts(obj: Any, args: int, kwargs: Sequence[str]) -> bool | None:
    """Whether ``obj`` can be called with ``args`` positionals and ``kwargs``; None: unknown."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*range(args), **dict.fromkeys(kwargs))
    except TypeError:
        return False
    return True


def resolve_function(obj: Any, n_inputs: int, params: Sequence[str], factory: bool | None) -> Any:
    """Apply the factory rule (see the module docstring) and return what to convert."""
    if not callable(obj):
        raise UsageError(f"the target is a {type(obj).__name__}, not a callable or a factory")
    if factory is None:
        factory = _accepts(obj, n_inputs, params) is False and _accepts(obj, 0, ()) is True
    if not factory:
        return obj
    result = obj()
    if not callable(result):
        raise UsageError(
            f"the factory returned a {type(result).__name__}, not a callable to convert"
        )
    return result


# -- commands ------------------------------------------------------------------


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        out.write("  ".join(cells).rstrip() + "\n")


def cmd_plugins(args: argparse.Namespace, out: TextIO) -> int:
    import jax2onnx

    plugin_set = jax2onnx.plugins()
    rows = [["plugin", "distribution", "version", "lowerings", "macros", "cases"]]
    for p in plugin_set.plugins:
        r = p.rules
        counts = (len(r.lowerings), len(r.macros), len(r.cases)) if r is not None else (0, 0, 0)
        rows.append([p.name, p.distribution, p.version, *map(str, counts)])
    out.write(f"jax2onnx {jax2onnx.__version__}: {len(plugin_set.plugins)} plugin(s) loaded\n")
    _table(rows, out)
    if plugin_set.failures:
        out.write(f"\n{len(plugin_set.failures)} plugin(s) failed to load:\n")
        failed = [["plugin", "distribution", "version", "error"]]
        failed += [[f.name, f.distribution, f.version, f.error] for f in plugin_set.failures]
        _table(failed, out)
    else:
        out.write("\nNo plugin failed to load.\n")
    return EXIT_OK


def cmd_manifest(args: argparse.Namespace, out: TextIO) -> int:
    import importlib.metadata
    from pathlib import Path

    from jax2onnx.frontend.loading import ENTRY_POINT_GROUP
    from jax2onnx.registration.manifest import source

    found = [
        ep
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if ep.name == args.plugin
    ]
    if not found:
        raise UsageError(
            f"no installed plugin (entry point of group 'jax2onnx') is named {args.plugin!r}"
        )
    module_name = found[0].module
    module = importlib.import_module(module_name)
    families = getattr(module, "FAMILIES", None)
    if not families:
        raise UsageError(f"{module_name} lists no FAMILIES (the family modules to defer)")
    package = module_name.rpartition(".")[0]
    modules = [f"{package}.{name}" if package else name for name in families]
    text = source(args.plugin, modules, f"jax2onnx manifest {args.plugin}")
    if args.output == "-":
        out.write(text)
        return EXIT_OK
    target = Path(args.output or Path(module.__file__).with_name("_manifest.py"))
    target.write_text(text)
    out.write(f"wrote {target} ({len(modules)} family modules)\n")
    return EXIT_OK


def _type_text(type_proto: Any) -> str:
    import onnx

    tensor = type_proto.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else "?"
    dims = [d.dim_param or str(d.dim_value) for d in tensor.shape.dim]
    return f"{dtype}[{', '.join(dims)}]"


def summarize(path: str, out: TextIO) -> None:
    """Print inputs, outputs, node count, an op histogram and the file size."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    graph = model.graph
    ops = collections.Counter(
        (f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
        for n in graph.node
    )
    out.write(f"wrote {path} ({os.path.getsize(path):,} bytes)\n")
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    out.write(f"opset: {opsets}\n")
    out.write("inputs:\n")
    for value in graph.input:
        out.write(f"  {value.name}: {_type_text(value.type)}\n")
    out.write("outputs:\n")
    for value in graph.output:
        out.write(f"  {value.name}: {_type_text(value.type)}\n")
    out.write(f"nodes: {len(graph.node)} (initializers: {len(graph.initializer)})\n")
    for op, count in ops.most_common(_HISTOGRAM_TOP):
        out.write(f"  {op}: {count}\n")
    if len(ops) > _HISTOGRAM_TOP:
        rest = sum(c for _, c in ops.most_common()[_HISTOGRAM_TOP:])
        out.write(f"  ... {len(ops) - _HISTOGRAM_TOP} more op type(s), {rest} node(s)\n")


def _target(args: argparse.Namespace) -> tuple[Any, list[_InputSpec], dict[str, Any]]:
    """The function, the input specs and the params the ``convert``/``verify`` options name."""
    if not args.input:
        raise UsageError("give the input shapes with --input, e.g. --input B,30")
    shapes = [parse_shape(text) for text in args.input]
    dtypes = parse_dtypes(args.dtype, len(shapes))
    wide = [d for d in dtypes if d.name in _NARROWED]
    if wide and not args.double:
        name = wide[0].name
        raise UsageError(
            f"--dtype {name} needs --double (enable_double_precision); without it the "
            f"input would be narrowed to {_NARROWED[name]}"
        )
    params = dict(parse_param(text) for text in args.input_param or ())
    obj = load_target(args.target)
    fn = resolve_function(obj, len(shapes), list(params), args.factory)
    return fn, [_InputSpec(s, d) for s, d in zip(shapes, dtypes, strict=True)], params


@contextlib.contextmanager
def _argument_errors() -> Iterator[None]:
    """``to_onnx``'s TypeError/ValueError about an argument, as a usage error."""
    try:
        yield
    except (TypeError, ValueError) as err:
        from jax2onnx.values.errors import Jax2OnnxError

        if isinstance(err, Jax2OnnxError):
            raise
        raise UsageError(str(err)) from err


def cmd_convert(args: argparse.Namespace, out: TextIO) -> int:
    import jax2onnx

    fn, inputs, params = _target(args)
    with _argument_errors():
        path = jax2onnx.to_onnx(
            fn,
            inputs,
            input_params=params or None,
            model_name=args.model_name,
            opset=args.opset,
            enable_double_precision=args.double,
            return_mode="file",
            output_path=args.output,
            native_half_precision=args.native_half_precision,
        )

    import onnx

    onnx.checker.check_model(path, full_check=True)
    summarize(path, out)
    return EXIT_OK


def sample(spec: _InputSpec, rng: Any) -> Any:
    """Random data for one input: symbolic dims are 2; floats normal, ints 0..3, bools."""
    import numpy as np

    shape = [d if isinstance(d, int) else 2 for d in spec.shape]
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 4, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    import numpy as np

    import jax2onnx

    fn, specs, params = _target(args)
    rng = np.random.default_rng(args.seed)
    inputs = [sample(spec, rng) for spec in specs]
    with _argument_errors():
        report = jax2onnx.verify(
            fn,
            inputs,
            input_params=params or None,
            model=args.model,
            rtol=args.rtol,
            atol=args.atol,
            progress=args.progress if args.progress is not None else sys.stderr.isatty(),
            opset=args.opset,
            enable_double_precision=args.double,
        )
    out.write(report.summary(rows=args.rows) + "\n")
    return EXIT_OK if report.ok else EXIT_FAILED


def _target_options(command: argparse.ArgumentParser) -> None:
    """The options naming what to convert, shared by ``convert`` and ``verify``."""
    command.add_argument("target", metavar="MODULE:ATTR", help="e.g. pkg.models:mlp or f.py:mlp")
    command.add_argument(
        "--input",
        "-i",
        action="append",
        metavar="SHAPE",
        help="shape of one positional input, comma separated; strings are symbolic "
        "dimensions (B,30). Repeat per input.",
    )
    command.add_argument(
        "--dtype",
        action="append",
        metavar="DTYPE",
        help="NumPy dtype of the inputs: once for all, or once per --input (default "
        "float32); float64 and complex128 need --double",
    )
    command.add_argument(
        "--input-param",
        action="append",
        metavar="NAME=VALUE",
        help="a keyword argument that becomes a scalar graph input named NAME",
    )
    command.add_argument("--opset", type=int, default=23, help="target ONNX opset (default 23)")
    command.add_argument(
        "--double",
        action="store_true",
        help="enable_double_precision: keep 64-bit types (needed for float64 and complex128)",
    )
    factory = command.add_mutually_exclusive_group()
    factory.add_argument(
        "--factory",
        dest="factory",
        action="store_true",
        default=None,
        help="call ATTR() and convert the result",
    )
    factory.add_argument(
        "--no-factory", dest="factory", action="store_false", help="convert ATTR itself"
    )


# -- entry point -------------------------------------------------------------


def build_parser(plugin_set: Any = None) -> argparse.ArgumentParser:
    """The command line parser; ``plugin_set``'s plugins add their own subcommands."""
    parser = argparse.ArgumentParser(
        prog="jax2onnx", description="Convert JAX functions and models to ONNX."
    )
    parser.add_argument(
        "--traceback", action="store_true", help="show the full traceback of an error"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    plugins = commands.add_parser("plugins", help="list loaded plugins and load failures")
    plugins.set_defaults(run=cmd_plugins)

    manifest = commands.add_parser(
        "manifest",
        help="write a plugin's _manifest.py (what each deferred family module declares)",
        description="Import the family modules PLUGIN's entry-point module lists in FAMILIES "
        "and write what each declares, for Rules.defer, as _manifest.py next to that module.",
    )
    manifest.add_argument("plugin", metavar="PLUGIN", help="the entry point's name, e.g. lax")
    manifest.add_argument("-o", "--output", help="the file to write ('-': standard output)")
    manifest.set_defaults(run=cmd_manifest)

    convert = commands.add_parser(
        "convert",
        help="convert MODULE:ATTR to an ONNX file",
        description="Convert a function (or a module a plugin understands) to ONNX. ATTR is "
        "called as a factory when --factory is given, or when it cannot take the inputs but "
        "takes no arguments.",
    )
    _target_options(convert)
    convert.add_argument("--model-name", default="jax_model", help="the ONNX graph's name")
    convert.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    convert.add_argument(
        "--native-half-precision",
        action="store_true",
        help="keep bfloat16/float16 ops for GPU runtimes "
        "(default: float32 where ONNX Runtime CPU has no kernel)",
    )
    convert.set_defaults(run=cmd_convert)

    verify = commands.add_parser(
        "verify",
        help="find the first operation where ONNX Runtime departs from JAX",
        description="Convert MODULE:ATTR, run it in ONNX Runtime and in JAX on the same random "
        "inputs (symbolic dimensions are 2), compare every operation's value and print the "
        "first that departs, with its source line. Exit status 1 when one departs.",
    )
    _target_options(verify)
    verify.add_argument("--model", help="an exported .onnx file to check instead of converting")
    verify.add_argument("--rtol", type=float, help="relative tolerance (default: per dtype)")
    verify.add_argument("--atol", type=float, help="absolute tolerance (default: per dtype)")
    verify.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    verify.add_argument("--rows", type=int, default=12, help="departing equations to list")
    verify.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on standard error (default: when it is a terminal)",
    )
    verify.set_defaults(run=cmd_verify)
    if plugin_set is not None:
        plugin_set.add_commands(commands)  # e.g. ``coverage`` from jax2onnx-testkit
    return parser


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    return first


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    import jax2onnx

    parser = build_parser(jax2onnx.plugins())
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse reports usage errors itself (status 2)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    out = sys.stdout
    try:
        return args.run(args, out)
    except UsageError as err:
        if args.traceback:
            raise
        print(f"jax2onnx {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as err:
        if args.traceback:
            raise
        from jax2onnx.values.errors import Jax2OnnxError

        if isinstance(err, Jax2OnnxError):
            message = str(err)  # our messages are written to be read in full
        else:
            message = f"{type(err).__name__}: {_one_line(err)} (--traceback shows where)"
        print(f"jax2onnx {args.command}: error: {message}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
