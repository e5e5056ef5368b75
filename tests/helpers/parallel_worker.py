"""One worker of a shared study, as a process of its own: the sweep or the cross-validation of a request
file, on the study's --storage, with the stand-in launchers of tests/helpers/sweep_stand_ins.py and
tests/helpers/crossval_stand_ins.py (no model is trained). Each trial it launches is appended to the
request's ledger (this process, the trial), and takes `seconds`, so that the workers' trials overlap.

    python -m tests.helpers.parallel_worker REQUEST.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from recipes_workbench.crossval.runner import CrossvalSettings, run_crossval
from recipes_workbench.sweep.config import sweep_config_from_values
from recipes_workbench.sweep.parallel import Workers
from recipes_workbench.sweep.runner import run_sweep
from tests.helpers.crossval_stand_ins import FoldStandIn
from tests.helpers.sweep_stand_ins import SweepStandIn, no_budget


def recording(launcher, ledger: Path, seconds: float):
    """The launcher, each trial it launches appended to the ledger before it takes `seconds`."""

    def launch(trial, config):
        what = trial.fold if hasattr(trial, "fold") else [trial.phase, trial.learning_rate, trial.seed]
        with open(ledger, "a") as handle:
            handle.write(json.dumps({"pid": os.getpid(), "trial": what}) + "\n")
        time.sleep(seconds)
        return launcher(trial, config)

    return launch


def main(path: str) -> int:
    request = json.loads(Path(path).read_text())
    workers = Workers(request.get("workers", 1), request.get("storage"))
    ledger, seconds = Path(request["ledger"]), request.get("seconds", 0.5)
    if request["kind"] == "sweep":
        config = sweep_config_from_values(request["config"], "the worker's request")
        launch = recording(SweepStandIn(), ledger, seconds)
        return run_sweep(config, launch=launch, preflight=no_budget, draw=False, workers=workers)
    settings = CrossvalSettings(**{key: value for key, value in request["settings"].items() if key != "data"},
                                data=tuple(tuple(item) for item in request["settings"]["data"]))  # fmt: skip
    return run_crossval(settings, launch=recording(FoldStandIn(), ledger, seconds), workers=workers)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
