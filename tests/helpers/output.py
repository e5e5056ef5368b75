"""What recipes-lib itself printed, told apart from what the libraries under it print.

The tests that say "one line" mean one line of the project's: its messages start with `error:` (and
its warnings with `warning:`). A library's own line (kernels 0.19.1 began to log one whenever
bitsandbytes loads offline) is not the project's to count, and used to fail these tests on a fresh
clone without any change here; whether such lines reach a user is checked where the project filters
them (tests/test_bitsandbytes_import.py, tests/test_quiet_runs.py).
"""

from __future__ import annotations

PROJECT_PREFIXES = ("error:", "warning:")


def project_lines(stderr: str) -> list[str]:
    """The project's own lines of a command's stderr; a traceback is never expected among them."""
    assert "Traceback (most recent call last)" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if line.startswith(PROJECT_PREFIXES)]
