"""Run a recipe script and record, in a ledger file, every results.json write and the process that made it.

    accelerate launch --config_file ... tests/helpers/scripts/record_results_writes.py recipes/full_ft.py ARGS

tests/test_multi_process.py launches recipes through this script (tests/helpers/runs.py,
`run_recording_results_writes`); it is a program, not a module to import. It wraps the run module's
`write_results` (run/record.py) so that each call appends the writing process's RANK to the file named by
RESULTS_WRITE_LEDGER, then runs the recipe exactly as `accelerate launch recipes/X.py ARGS` would.
The final results.json alone cannot show a second write (the rename is atomic); the ledger can.
"""

from __future__ import annotations

import os
import runpy
import sys

from recipes_lib.run import record

LEDGER = os.environ["RESULTS_WRITE_LEDGER"]
_write_results = record.write_results


def recording_write_results(output_dir, results):
    with open(LEDGER, "a") as ledger:
        ledger.write(f"rank {os.environ.get('RANK', '0')}\n")
    return _write_results(output_dir, results)


if __name__ == "__main__":
    record.write_results = recording_write_results
    recipe_script = sys.argv[1]
    sys.argv = sys.argv[1:]  # the recipe reads its arguments from sys.argv[1:], as when run directly
    runpy.run_path(recipe_script, run_name="__main__")
