"""``passes_off``: conversions with some of the optimisation passes switched off.

What a pass buys is measured against the same conversion without it: the tests
of a pass compare the two exports' graphs and numbers, ``benchmarks/scientific.py``
their node runs and latencies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def passes_off(*classes: type) -> Iterator[None]:
    """Within the block, each pass class in ``classes`` changes nothing when it runs.

    Process-wide (the classes' ``call`` is replaced and put back on leaving, also on
    an exception): for tests and benchmarks, not for conversions running on other
    threads meanwhile.
    """
    from onnx_ir.passes import PassResult  # the passes are onnx_ir passes

    calls = [cls.call for cls in classes]
    for cls in classes:
        cls.call = lambda self, model: PassResult(model, False)
    try:
        yield
    finally:
        for cls, call in zip(classes, calls, strict=True):
            cls.call = call
