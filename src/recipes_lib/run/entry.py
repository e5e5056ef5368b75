"""The entry point of a recipe script: a user error becomes one paragraph and an exit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from recipes_lib.config.parsing import wants_traceback
from recipes_lib.errors import RecipeError


def run_main(main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> Any:
    """Call a recipe's `main(argv)`; a user error becomes one paragraph on stderr and its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return main(argv)
    except RecipeError as error:
        if wants_traceback(argv):
            raise
        hint = "\n(run again with --debug for the traceback)" if error.offer_traceback else ""
        print(f"\n{error.heading}: {error}{hint}", file=sys.stderr)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        # Ctrl-C before training started (nothing to save yet), or a second Ctrl-C during it.
        print("\ninterrupted: stopped at once; no new checkpoint was written.", file=sys.stderr)
        sys.exit(130)
