"""Print setup.cfg's install_requires and the `sweep` extra with every lower bound pinned exactly: the
oldest supported set.

`make test-oldest` installs this list into .venv-oldest and runs the default suite on it, so the
lower bounds in setup.cfg stay ones the suite has passed on.

    python tools/oldest_requirements.py [setup.cfg]   # one pip requirement a line, on stdout
"""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

# Extras pinned too: the sweep's Optuna (its study and heartbeat API changed names across 4.x).
PINNED_EXTRAS = ("sweep",)
# torch is left as written (`torch>=X`): the Makefile installs it first, the CPU build without a GPU, and
# the pin for that build is the Makefile's, so pip keeps the torch it finds.
UNPINNED = {"torch"}
# NAME[extras] SPEC [; marker]: the name with its extras, the version specifiers, the environment marker.
REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9._-]+)(?P<extras>\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*(?P<marker>;.*)?$"
)


def oldest(line: str) -> str:
    """`name[extras]>=X,<Y ; marker` -> `name[extras]==X ; marker`; a line without `>=` unchanged."""
    match = REQUIREMENT.match(line)
    if match is None or match["name"].lower() in UNPINNED:
        return line
    lower = re.search(r">=\s*([^,\s]+)", match["spec"])
    if lower is None:
        return line
    marker = f" {match['marker']}" if match["marker"] else ""
    return f"{match['name']}{match['extras'] or ''}=={lower[1]}{marker}"


def main(path: str = "setup.cfg") -> None:
    config = configparser.ConfigParser()
    config.read_string(Path(path).read_text())
    requirements = [config["options"]["install_requires"]]
    requirements += [config["options.extras_require"][extra] for extra in PINNED_EXTRAS]
    for line in "\n".join(requirements).splitlines():
        line = line.split("#", 1)[0].strip()  # configparser drops comment-only lines, not trailing ones
        if line:
            print(oldest(line))


if __name__ == "__main__":
    main(*sys.argv[1:])
