"""The `recipes-lib` command: parses the command line and hands each command to its module (tools/,
export/, sweep/, crossval/, recipes_workbench/dashboard.py); nothing else lives here."""


def options_of(args, *names: str) -> dict:
    return {name: getattr(args, name) for name in names}
