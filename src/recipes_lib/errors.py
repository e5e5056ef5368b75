"""User-facing errors: anything the user can fix is a `RecipeError`, which `run_main` turns into one
paragraph on stderr and an exit code, with no traceback unless --debug asks for it.
"""

from __future__ import annotations


class RecipeError(Exception):
    """An error the user can fix. The message names the bad value and says how to fix it."""

    exit_code = 2
    # How the one paragraph on stderr starts, and whether it offers `--debug` for the traceback.
    heading = "error"
    offer_traceback = True


class ConfigError(RecipeError):
    """Bad arguments: unknown key, wrong type, missing or unparsable config file."""


class DataError(RecipeError):
    """Bad data: missing file or column, bad labels, empty split."""


class ModelError(RecipeError):
    """The model cannot be found or does not fit the data."""


class OutputDirError(RecipeError):
    """The output directory holds another run that would be overwritten."""


class TrainingDiverged(RecipeError):
    """The loss or the weights became NaN or infinite: the run stops before saving them as a model. Exit
    code 3, not 2: the input was valid, the optimisation was not (a learning-rate sweep tells them apart)."""

    exit_code = 3


class TrainingInterrupted(RecipeError):
    """SIGINT or SIGTERM stopped training after a checkpoint was saved; the run can be resumed. Exit code:
    the shell's for a process ended by a signal, 128 + its number (130 for Ctrl-C, 143 for SIGTERM)."""

    heading = "interrupted"
    offer_traceback = False

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number


class HubError(RecipeError):
    """The Hugging Face Hub cannot take a push: no token, offline mode, no network, or no access to the repo."""

    offer_traceback = False
