"""Secrets (Hub tokens, API keys): used where they are needed, written nowhere (docs/sharing.md).

A secret option (`--hub_token`, or `hub_token:` in the --config YAML) leaves the parsed arguments as
soon as they are parsed, for the environment variable the library using it reads (HF_TOKEN). The
arguments object is pickled into training_args.bin and every checkpoint, and results.json, the card and
W&B's config are made from it: an object that never holds the token cannot leak it through a writer
added later. Its value in sys.argv (which W&B records) is replaced too; /proc/PID/cmdline keeps it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Iterable

# An option named like a credential: hub_token, token, wandb_api_key, ... (not tokenizer_name or
# include_num_input_tokens_seen: the word must end the name).
SECRET_OPTION = re.compile(r"(?:^|_)(?:token|key|secret|password)$")
# The environment variable each secret option is handed over through (the one its library reads).
ENVIRONMENT_OF = {"hub_token": "HF_TOKEN"}
REDACTED = "<redacted>"


def is_secret_option(name: str) -> bool:
    return bool(SECRET_OPTION.search(name.removeprefix("--").lower()))


def hand_over_secrets(*arguments) -> None:
    """Move every secret field of these freshly parsed dataclasses into its environment variable and
    set the field to None; then take the values out of sys.argv (see the module's docstring)."""
    for parsed in arguments:
        for field in dataclasses.fields(parsed):
            value = getattr(parsed, field.name)
            if value is not None and field.name in ENVIRONMENT_OF:
                os.environ[ENVIRONMENT_OF[field.name]] = str(value)
                setattr(parsed, field.name, None)
    sys.argv[:] = redacted_argv(sys.argv)


def redacted_argv(argv: list[str]) -> list[str]:
    """`argv` with the value of each secret option (`--hub_token X`, `--hub_token=X`) replaced by REDACTED."""
    redacted, hide_next = [], False
    for item in argv:
        name, equals, _ = item.partition("=")
        secret = item.startswith("--") and is_secret_option(name)
        if hide_next:
            redacted.append(REDACTED)
        elif secret and equals:
            redacted.append(f"{name}={REDACTED}")
        else:
            redacted.append(item)
        hide_next = secret and not equals and not hide_next
    return redacted


def without_secrets(options: Iterable[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...]]]:
    """(option, values) pairs for a child's command line, the handed-over secrets left out."""
    return [(key, values) for key, values in options if key not in ENVIRONMENT_OF]


def secrets_environment(options: Iterable[tuple[str, tuple[str, ...]]]) -> dict[str, str]:
    """The environment that carries the secret options left out by `without_secrets` to a child process."""
    return {ENVIRONMENT_OF[key]: " ".join(values) for key, values in options if key in ENVIRONMENT_OF}
