"""Turn `pip list --format=freeze` of an environment the suite passed in into constraints.txt.

    python tools/constraints.py .venv-latest/installed.txt > constraints.txt

`make install` installs with `-c constraints.txt`, so a fresh clone gets the versions the tests last
passed on, whatever the registry serves that day; `make test-latest` tries the newest and rewrites the
file when they pass. Left out: torch and its CUDA companions (the Makefile installs the CPU build without
a GPU, and GPU users get the build that matches their driver), pip's own tooling, and this project.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# Names as pip writes them in a freeze; the comparison ignores case, and '_' against '-'.
LEFT_OUT = re.compile(r"^(torch|triton|nvidia-.*|pip|setuptools|wheel|recipes-lib)$")
HEADER = (
    "# Known-good versions for `make install` (pip install -c constraints.txt): the environment the default\n"
    "# suite last passed in. Rewritten by `make test-latest` when the suite passes on the newest releases;\n"
    "# made by tools/constraints.py. torch is not held here (the Makefile installs its build).\n"
)


def constraints(freeze_lines: list[str]) -> list[str]:
    """The `name==version` lines to keep, sorted by name; editable installs and comments dropped."""
    kept = {}
    for line in freeze_lines:
        line = line.strip()
        if not line or line.startswith(("#", "-e ")) or "==" not in line:
            continue
        name, version = line.split("==", 1)
        normalized = re.sub(r"[-_.]+", "-", name).lower()
        if LEFT_OUT.match(normalized):
            continue
        kept[normalized] = f"{normalized}=={version}"
    return [kept[name] for name in sorted(kept)]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python tools/constraints.py INSTALLED.txt (the output of pip list --format=freeze)",
            file=sys.stderr,
        )
        return 2
    lines = constraints(Path(argv[0]).read_text().splitlines())
    sys.stdout.write(HEADER + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
