"""bitsandbytes, loaded where a recipe uses it, without its alarming lines on CPU.

transformers' TrainingArguments imports peft, which imports bitsandbytes whenever it is installed: every
recipe would pay its seconds of import and, on a CPU with AVX-512 BF16, log "Failed to load CPU
gemm_4bit_forward from kernels-community" (and, offline, `kernels` 0.19's "Skipping publisher trust check
for 'kernels-community/quantization-bitsandbytes'"), read as an error. That kernel serves only 4-bit
weights repacked for CPU inference, which nothing here uses. Both blocks below are undone when they end,
so importing the package changes nothing outside it (tests/test_import_side_effects.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys
from contextlib import contextmanager

PACKAGE = "bitsandbytes"
# bitsandbytes 0.50's CPU backend warns through this logger (backends/cpu/ops.py); `kernels` 0.19 warns
# about the repository bitsandbytes asks it for through the other (_internals/hf_hub.py).
KERNELS_LOGGER = "bitsandbytes.backends.cpu.ops"
KERNELS_MESSAGE = "Failed to load CPU gemm_4bit_forward from kernels-community"
KERNELS_HUB_LOGGER = "kernels._internals.hf_hub"
KERNELS_REPOSITORY = "kernels-community/quantization-bitsandbytes"


class _LazyBitsandbytes(importlib.abc.MetaPathFinder):
    """Finds bitsandbytes as the finders after it do (an editable install's too), its code deferred to
    first use. A finder, not a module put in sys.modules: peft's find_spec would run that at once."""

    searching = False

    def find_spec(self, name, path, target=None):
        if name != PACKAGE or self.searching:
            return None
        self.searching = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.searching = False
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


@contextmanager
def deferred_bitsandbytes():
    """In the block, a first `import bitsandbytes` (peft's) defers bitsandbytes' code to its first use."""
    finder = _LazyBitsandbytes()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


class _DropKernelsLine(logging.Filter):
    """Drops the lines about bitsandbytes' CPU kernel; lets every other bitsandbytes or `kernels` line through."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not (message.startswith(KERNELS_MESSAGE) or KERNELS_REPOSITORY in message)


@contextmanager
def kernels_line_dropped():
    """The kernels lines dropped in the block, where bitsandbytes' code may first run (it warns as it loads)."""
    dropping, loggers = (
        _DropKernelsLine(),
        [logging.getLogger(KERNELS_LOGGER), logging.getLogger(KERNELS_HUB_LOGGER)],
    )
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
