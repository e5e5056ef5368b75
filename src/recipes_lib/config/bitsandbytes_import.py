"""bitsandbytes loads only when a recipe uses it, and its one alarming line on CPU is dropped.

Importing `transformers.TrainingArguments` imports peft (transformers' trainer_utils does, when peft
is installed), and peft 0.21 imports bitsandbytes whenever it is installed (peft/helpers.py), so
every command, `recipes-lib plan` included, used to load bitsandbytes. On a CPU with AVX-512 BF16
its CPU backend then looks for an optional kernel in the `kernels` package and, when that package
is absent, logs "Failed to load CPU gemm_4bit_forward from kernels-community", read by a newcomer
as an error.

`defer_bitsandbytes` (called when recipes_lib is imported, before anything imports peft) makes a
plain `import bitsandbytes` lazy with the standard library's `importlib.util.LazyLoader`: the
module object exists, and bitsandbytes' code runs at its first real use (an attribute read, or an
import of one of its submodules): adamw_8bit's optimizer, QLoRA's quantization, LoRA on an 8-bit
base, the reload of a quantized adapter, and peft's LoRA itself, whose layer dispatch asks
bitsandbytes whether it has 4-bit layers (peft/tuners/lora/model.py). `plan`, which builds LoRA
models with peft to count their parameters, never imports it (`bitsandbytes_hidden`).

Where it does load, the kernels lines are dropped (`_DropKernelsLine`): bitsandbytes' own "Failed to
load" line, and, since `kernels` 0.19 (which transformers installs), that package's "Skipping publisher
trust check for 'kernels-community/quantization-bitsandbytes'" line whenever the Hub is offline. That
kernel only serves 4-bit weights repacked for CPU inference (bitsandbytes' `packing_format_for_cpu`,
set the first time a 4-bit layer runs in eval mode), and every 4-bit model here is kept in its
training layout (adapters.prepare_4bit_model), so no recipe, `predict` or `export` would ever call
it: installing `kernels` would change nothing but the message.
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


class _DropKernelsLine(logging.Filter):
    """Drops the lines about bitsandbytes' optional CPU kernel (the module docstring says why it
    concerns no run here); lets every other bitsandbytes or `kernels` message through."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not (message.startswith(KERNELS_MESSAGE) or KERNELS_REPOSITORY in message)


def defer_bitsandbytes() -> None:
    """Install the lazy finder and the kernels line's filter (once; the finder only while bitsandbytes is
    not loaded yet)."""
    for logger_name in (KERNELS_LOGGER, KERNELS_HUB_LOGGER):
        kernels_logger = logging.getLogger(logger_name)
        if not any(isinstance(f, _DropKernelsLine) for f in kernels_logger.filters):
            kernels_logger.addFilter(_DropKernelsLine())
    if PACKAGE not in sys.modules and not any(isinstance(f, _LazyBitsandbytes) for f in sys.meta_path):
        sys.meta_path.insert(0, _LazyBitsandbytes())


def bitsandbytes_loaded() -> bool:
    """Whether bitsandbytes' code has run in this process (its submodules load with it), not just its lazy stub."""
    return any(name.startswith(PACKAGE + ".") for name in sys.modules)


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
