"""bitsandbytes, loaded where a recipe uses it, without its one alarming line on CPU.

transformers' TrainingArguments imports peft, and peft 0.21 imports bitsandbytes whenever it is
installed, so every recipe loaded it: seconds of import, and on a CPU with AVX-512 BF16 a logged
"Failed to load CPU gemm_4bit_forward from kernels-community" (and `kernels` 0.19's offline "Skipping
publisher trust check for 'kernels-community/quantization-bitsandbytes'"), read as an error. That
kernel serves only 4-bit weights repacked for CPU inference, which nothing here uses.

Two blocks, each undone when it ends, so importing the package changes nothing outside it:
`deferred_bitsandbytes()` around the import that reaches peft (a plain `import bitsandbytes` in it
gives the module with its code deferred to first use: `importlib.util.LazyLoader`), and
`kernels_line_dropped()` around each first use (`import_bitsandbytes`; adapters.peft_wrapping).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys
from contextlib import contextmanager

PACKAGE = "bitsandbytes"
# The logger and the message bitsandbytes 0.50's CPU backend warns with (bitsandbytes/backends/cpu/ops.py).
KERNELS_LOGGER = "bitsandbytes.backends.cpu.ops"
KERNELS_MESSAGE = "Failed to load CPU gemm_4bit_forward from kernels-community"
# The repository bitsandbytes asks `kernels` for, and the logger `kernels` 0.19 warns on when it looks
# it up offline (kernels/_internals/hf_hub.py): "Skipping publisher trust check for '<repository>' ...".
KERNELS_REPOSITORY = "kernels-community/quantization-bitsandbytes"
KERNELS_HUB_LOGGER = "kernels._internals.hf_hub"


class _LazyBitsandbytes(importlib.abc.MetaPathFinder):
    """Finds bitsandbytes as the other finders do, and hands it out with its execution deferred."""

    searching = False

    def find_spec(self, name, path, target=None):
        if name != PACKAGE or self.searching:
            return None
        self.searching = True  # ask the finders after this one (an editable install's too)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.searching = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # not installed (ImportError as usual), or a loader LazyLoader cannot wrap
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


@contextmanager
def deferred_bitsandbytes():
    """In the block, `import bitsandbytes` (peft's, when transformers imports it) defers bitsandbytes'
    code to its first use; nothing is left installed afterwards."""
    if PACKAGE in sys.modules:  # imported already, deferred or not: later imports find that module
        yield
        return
    finder = _LazyBitsandbytes()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


class _DropKernelsLine(logging.Filter):
    """Drops the lines about bitsandbytes' optional CPU kernel (the module docstring says why it
    concerns no run here); lets every other bitsandbytes or `kernels` message through."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not (message.startswith(KERNELS_MESSAGE) or KERNELS_REPOSITORY in message)


@contextmanager
def kernels_line_dropped():
    """The kernels lines dropped in the block, where bitsandbytes' code may run for the first time
    (it warns once, as it loads)."""
    dropping = _DropKernelsLine()
    loggers = [logging.getLogger(name) for name in (KERNELS_LOGGER, KERNELS_HUB_LOGGER)]
    for kernels_logger in loggers:
        kernels_logger.addFilter(dropping)
    try:
        yield
    finally:
        for kernels_logger in loggers:
            kernels_logger.removeFilter(dropping)


def import_bitsandbytes(submodule: str = "nn"):
    """bitsandbytes with its code run (`submodule` imported), for a recipe that uses it now."""
    with kernels_line_dropped():
        importlib.import_module(f"{PACKAGE}.{submodule}")
    return sys.modules[PACKAGE]


def bitsandbytes_loaded() -> bool:
    """Whether bitsandbytes' code has run in this process (its submodules load with it), not just its lazy stub."""
    return any(name.startswith(PACKAGE + ".") for name in sys.modules)
