"""Secrets (Hub tokens, API keys, passwords): used where they are needed, written and printed nowhere. Refused
on any command line, handed from the YAML to the environment as soon as they are parsed (the arguments are
pickled into every checkpoint), and `redact`ed from every message: docs/sharing.md, "Tokens and keys".
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable

from recipes_lib.errors import ConfigError

# An option named like a credential: hub_token, token, wandb_api_key, db_password, ... (not
# tokenizer_name or include_num_input_tokens_seen: the word must end the name).
SECRET_OPTION = re.compile(r"(?:^|_)(?:token|key|secret|password|passwd|credentials?)$")
# The environment variable each secret option is handed over through (the one its library reads).
ENVIRONMENT_OF = {"hub_token": "HF_TOKEN"}
REDACTED = "<redacted>"
# USER:PASSWORD@ in a URL's authority, and a secret-named query parameter (?password=, &api_key=).
# One slash too: a URL given where a directory goes comes back from Path() as "postgresql:/u:PW@h/db".
URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][\w+.-]*://?[^/\s:@'\"]*:)[^\s/'\"]*(?=@)")
QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:[\w.-]*_)?(?:token|key|secret|password|passwd|credentials?)=)[^&\s'\"#]*", re.I
)
# Values shorter than this are not searched for in messages (an HF_TOKEN of "1" would blank every 1).
SHORTEST_SEARCHED = 6


def canonical(name: str) -> str:
    """'--hub-token' -> 'hub_token': the spelling HfArgumentParser's dashed aliases map to."""
    return name.lstrip("-").lower().replace("-", "_")


def is_secret_option(name: str) -> bool:
    return bool(SECRET_OPTION.search(canonical(name)))


def secret_options_in(argv: Iterable[str]) -> list[str]:
    """The secret options (`--hub-token X`, `--hub_token=X`, `--token X`) among these arguments, as written."""
    return [
        item.partition("=")[0]
        for item in argv
        if item.startswith("-") and is_secret_option(item.partition("=")[0])
    ]


def refuse_secret_options(argv: Iterable[str], where: str = "the command line") -> None:
    """A ConfigError naming each secret option in argv (never its value) and the ways in that show it to nobody."""
    found = secret_options_in(argv)
    if found:
        raise ConfigError(
            f"{', '.join(dict.fromkeys(found))} is a secret, and {where} is no place for one: shell history, "
            "`ps` and the launcher's error output show it. Nothing was run. Give a Hub token through the "
            "environment (export HF_TOKEN=..., or `hf auth login` once, which every command then finds), or as "
            "`hub_token:` in the --config YAML file (a sweep: in its `args`); a W&B key as WANDB_API_KEY or "
            "`wandb login`."
        )


def hand_over_secrets(*arguments) -> None:
    """Move every secret field of these freshly parsed dataclasses into its environment variable (field: None)."""
    for parsed in arguments:
        for field in dataclasses.fields(parsed):
            value = getattr(parsed, field.name)
            if value is not None and field.name in ENVIRONMENT_OF:
                os.environ[ENVIRONMENT_OF[field.name]] = str(value)
                setattr(parsed, field.name, None)


def redact(text: str, *secrets: str) -> str:
    """`text` without URL passwords, secret query parameters, `secrets`, or the value of any secret-named
    environment variable (HF_TOKEN, WANDB_API_KEY, ...): for every message a command prints."""
    known = [*secrets, *(value for name, value in os.environ.items() if is_secret_option(name))]
    text = QUERY_SECRET.sub(rf"\g<head>{REDACTED}", URL_PASSWORD.sub(_hide_password, text))
    for value in sorted(known, key=len, reverse=True):
        if len(value) >= SHORTEST_SEARCHED:
            text = text.replace(value, REDACTED)
    return text


def _hide_password(match: re.Match) -> str:
    """USER:<redacted>@, except the placeholder the help and the errors show (USER:PASSWORD@HOST)."""
    password = match.group(0)[len(match.group("head")) :]
    return match.group(0) if password == "PASSWORD" else match.group("head") + REDACTED
