"""User-facing errors.

Anything the user can fix (a typo in a config, a missing column, a wrong path) is raised as a
`RecipeError` subclass. The recipe entry point turns it into one paragraph on stderr and a non-zero
exit, with no traceback unless `--debug` is given: a traceback through argparse or pandas hides the
one line that matters.
"""

from __future__ import annotations


class RecipeError(Exception):
    """An error the user can fix. The message names the bad value and says how to fix it."""

    exit_code = 2


class ConfigError(RecipeError):
    """Bad arguments: unknown key, wrong type, missing or unparsable config file."""


class DataError(RecipeError):
    """Bad data: missing file or column, bad labels, empty split."""


class ModelError(RecipeError):
    """The model cannot be found or does not fit the data."""


class OutputDirError(RecipeError):
    """The output directory holds another run that would be overwritten."""
