"""bitsandbytes loads only when a recipe uses it, and its one alarming line on CPU is explained.

Importing `transformers.TrainingArguments` imports peft (transformers' trainer_utils does, when peft
is installed), and peft 0.21 imports bitsandbytes whenever it is installed (peft/helpers.py), so
every command, `recipes-lib plan` included, used to load bitsandbytes. On a CPU with AVX-512 BF16
its CPU backend then looks for an optional kernel in the `kernels` package and, when that package
is absent, logs "Failed to load CPU gemm_4bit_forward from kernels-community": harmless (it uses
its own CPU code), and read by a newcomer as an error.

`defer_bitsandbytes` (called when recipes_lib is imported, before anything imports peft) makes a
plain `import bitsandbytes` lazy with the standard library's `importlib.util.LazyLoader`: the
module object exists, and bitsandbytes' code runs at its first real use (an attribute read, or an
import of one of its submodules): adamw_8bit's optimizer, QLoRA's quantization, LoRA on an 8-bit
base, the reload of a quantized adapter, and peft's LoRA itself, whose layer dispatch asks
bitsandbytes whether it has 4-bit layers (peft/tuners/lora/model.py). A full fine-tune never loads
it, and `plan`, which builds LoRA models with peft to count their parameters, never imports it
(`bitsandbytes_hidden`). When it does load, the kernels line is preceded by one line of ours saying
what it means.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from contextlib import contextmanager

PACKAGE = "bitsandbytes"
# The logger and the message bitsandbytes 0.50's CPU backend warns with (bitsandbytes/backends/cpu/ops.py).
KERNELS_LOGGER = "bitsandbytes.backends.cpu.ops"
KERNELS_MESSAGE = "Failed to load CPU gemm_4bit_forward from kernels-community"
EXPLANATION = (
    "bitsandbytes is loading (peft's LoRA and the 8-bit and 4-bit recipes use it). If the next line says 'Failed to load CPU gemm_4bit_forward "
    "from kernels-community', it is harmless: that faster CPU 4-bit kernel comes from the optional `kernels` "
    "package, which is not installed, so bitsandbytes uses its own CPU code (`pip install kernels` silences it)."
)


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


class _ExplainKernelsLine(logging.Filter):
    """Lets bitsandbytes' kernels line through, once preceded by what it means."""

    explained = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.explained and str(record.msg).startswith(KERNELS_MESSAGE):
            _ExplainKernelsLine.explained = True
            logging.getLogger("recipes_lib").warning(EXPLANATION)
        return True


def defer_bitsandbytes() -> None:
    """Install the lazy finder and the explanation (once; nothing to do when bitsandbytes is already loaded)."""
    kernels_logger = logging.getLogger(KERNELS_LOGGER)
    if not any(isinstance(f, _ExplainKernelsLine) for f in kernels_logger.filters):
        kernels_logger.addFilter(_ExplainKernelsLine())
    if PACKAGE not in sys.modules and not any(isinstance(f, _LazyBitsandbytes) for f in sys.meta_path):
        sys.meta_path.insert(0, _LazyBitsandbytes())


def bitsandbytes_loaded() -> bool:
    """Whether bitsandbytes' code has run in this process (its submodules load with it), not just its lazy stub."""
    return any(name.startswith(PACKAGE + ".") for name in sys.modules)


@contextmanager
def quiet_bitsandbytes():
    """bitsandbytes' warnings silenced for a command that never uses it but may load it on the way
    (wandb's import does: pydantic reads the source of every loaded module, the lazy stub included)."""
    loggers = [logging.getLogger(PACKAGE), logging.getLogger(KERNELS_LOGGER)]
    levels = [bnb_logger.level for bnb_logger in loggers]
    for bnb_logger in loggers:
        bnb_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for bnb_logger, level in zip(loggers, levels, strict=True):
            bnb_logger.setLevel(level)


@contextmanager
def bitsandbytes_hidden():
    """bitsandbytes kept out of the block (unless it is loaded already), for code that never uses it.

    The planner builds a LoRA model on the meta device with peft to count what trains; peft imports
    bitsandbytes and asks it for its 8-bit and 4-bit layers, which loads it (and on some CPUs prints
    its kernels line) for a command, `plan`, that quantizes nothing. In the block `import
    bitsandbytes` fails, as if it were not installed, and peft skips its bitsandbytes layers, which a
    meta model has none of. Afterwards the module is as it was, and the answers peft and
    transformers cached about bitsandbytes in the block are forgotten, so a recipe that runs later in
    the same process (a test, a sweep's check) finds it again.
    """
    if bitsandbytes_loaded():
        yield
        return
    before = sys.modules.get(PACKAGE, _ABSENT)
    sys.modules[PACKAGE] = None  # importlib: "import of bitsandbytes halted; None in sys.modules"
    try:
        yield
    finally:
        if before is _ABSENT:
            sys.modules.pop(PACKAGE, None)
        else:
            sys.modules[PACKAGE] = before
        for module_name, cached in (
            ("peft.import_utils", "is_bnb_available"),
            ("peft.import_utils", "is_bnb_4bit_available"),
            ("transformers.utils.import_utils", "is_bitsandbytes_available"),
        ):
            answer = getattr(sys.modules.get(module_name), cached, None)
            if hasattr(answer, "cache_clear"):
                answer.cache_clear()
        # peft imported first in the block keeps `peft.helpers.bnb = None`: only its condition-number
        # tool (no recipe's) reads it.


_ABSENT = object()
