"""Trials and folds in parallel (src/recipes_workbench/sweep/parallel.py): `--workers N` on one machine and
`--storage URL` shared between machines.

The tests drive the real study loop (Optuna on SQLite) with the stand-in launchers of
tests/helpers/sweep_stand_ins.py and tests/helpers/crossval_stand_ins.py, slowed a little so that workers'
trials overlap: every trial runs once, the report equals one worker's, each worker's trials get its slot
(one GPU, or a share of the cores), Ctrl-C stops them all as interrupted; all but the folds' are slow (a few
seconds to 25 s each on 2 cores: a trial's bookkeeping in SQLite costs about a second). The slowest starts a
real PostgreSQL server (pgserver, the 'postgres' extra) and lets two worker processes drain one sweep and
one cross-validation on it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from recipes_lib.errors import ConfigError
from recipes_workbench.cli.main import main as cli_main
from recipes_workbench.crossval.runner import run_crossval
from recipes_workbench.sweep import parallel
from recipes_workbench.sweep.parallel import Workers, slot_environments
from recipes_workbench.sweep.runner import run_sweep
from recipes_workbench.sweep.trials import Outcome
from tests.helpers.crossval_stand_ins import FoldStandIn, read_oof, settings_for, single_label_file
from tests.helpers.output import project_lines
from tests.helpers.repo import ACCELERATE_CONFIGS, REPO_ROOT
from tests.helpers.sweep_stand_ins import (
    SweepStandIn,
    comparable,
    config_values,
    make_config,
    no_budget,
    sweep_results,
)

pytest.importorskip("optuna")

CPU = str(ACCELERATE_CONFIGS / "cpu.yaml")
SINGLE_GPU = str(ACCELERATE_CONFIGS / "single_gpu.yaml")


class Overlapping:
    """A stand-in launcher that takes `seconds` per trial and records, for each trial, what it ran, the
    environment its worker gave it, and how many trials were running at once."""

    def __init__(self, launcher, seconds: float = 0.3):
        self.launcher, self.seconds = launcher, seconds
        self.lock = threading.Lock()
        self.running = self.most_at_once = 0
        self.environments: list[dict[str, str]] = []

    @property
    def launched(self):
        return self.launcher.launched

    def __call__(self, trial, config) -> Outcome:
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.environments.append(dict(trial.environment))
        try:
            time.sleep(self.seconds)
            with self.lock:
                return self.launcher(trial, config)
        finally:
            with self.lock:
                self.running -= 1


# --- each worker's slot ------------------------------------------------------------------------------------


def test_one_worker_adds_nothing_to_a_trials_environment():
    assert slot_environments(1, SINGLE_GPU) == [{}] and slot_environments(1, CPU) == [{}]


def test_on_gpus_each_worker_gets_one_and_more_workers_than_gpus_is_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert slot_environments(2, SINGLE_GPU) == [{"CUDA_VISIBLE_DEVICES": "3"}, {"CUDA_VISIBLE_DEVICES": "5"}]
    with pytest.raises(ConfigError) as refused:
        slot_environments(3, SINGLE_GPU)
    message = str(refused.value)
    assert "--workers 3" in message and "2 GPU(s) are visible (CUDA_VISIBLE_DEVICES=3,5)" in message
    assert "Give --workers 2 or fewer" in message and "accelerate_configs/cpu.yaml" in message


def cores(count: int):
    """os.sched_getaffinity (what cpu_cores reads) as a machine of `count` cores would answer."""
    return lambda pid: set(range(count))


@pytest.mark.parametrize(
    ("machine", "workers", "threads"), [(16, 2, "8"), (16, 3, "5"), (3, 2, "1"), (2, 8, "1")]
)
def test_on_the_cpu_the_cores_are_split_between_the_workers(monkeypatch, machine, workers, threads):
    monkeypatch.setattr(os, "sched_getaffinity", cores(machine))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # a CPU accelerate config leaves the GPUs alone
    expected = [{"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}] * workers
    assert slot_environments(workers, CPU) == expected
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # no GPU visible: the CPU, whatever the config
    assert slot_environments(workers, SINGLE_GPU) == expected


# --- workers on one machine --------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_workers_run_every_trial_once_and_report_what_one_worker_does(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "cpu_cores", lambda: 6)
    alone = make_config(tmp_path / "one")
    assert run_sweep(alone, launch=SweepStandIn(), preflight=no_budget, draw=False) == 0
    config = make_config(tmp_path / "two")
    launcher = Overlapping(SweepStandIn(), seconds=1.0)  # long beside the study's own steps on busy cores
    assert run_sweep(config, launch=launcher, preflight=no_budget, draw=False, workers=Workers(2)) == 0
    assert launcher.most_at_once == 2  # two trials did run at once
    assert len(launcher.launched) == len(set(launcher.launched)) == 11  # each once
    assert comparable(sweep_results(config)) == comparable(sweep_results(alone))
    assert all(env == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3"} for env in launcher.environments)


def test_two_workers_run_the_folds_once_each_and_write_every_rows_prediction(tmp_path):
    settings = settings_for(tmp_path, single_label_file(tmp_path, rows=30), folds=4)
    launcher = Overlapping(FoldStandIn(), seconds=1.0)

    assert run_crossval(settings, launch=launcher, workers=Workers(2)) == 0
    assert sorted(launcher.launched) == [0, 1, 2, 3] and launcher.most_at_once == 2
    assert [row["row"] for row in read_oof(settings)] == list(range(30))


@pytest.mark.slow
def test_a_value_queued_twice_runs_once(tmp_path):
    """Machines sharing a study may each enqueue a value: the copy taken second is not run."""
    import optuna

    config = make_config(tmp_path, recipes={"full_ft": {"learning_rate": [2e-5, 5e-5]}}, seeds=[1])
    storage = f"sqlite:///{Path(config.output_dir).resolve()}/sweep.db"
    Path(config.output_dir).mkdir(parents=True)
    study = optuna.create_study(study_name="full_ft:search", storage=storage, direction="maximize")
    for lr in (2e-5, 5e-5, 2e-5, 5e-5):  # what two machines starting together may queue
        study.enqueue_trial({"learning_rate": lr})
    launcher = Overlapping(SweepStandIn(), seconds=0.1)
    assert run_sweep(config, launch=launcher, preflight=no_budget, draw=False, workers=Workers(2)) == 0
    assert sorted(launcher.launched) == [("full_ft", "search", 2e-5, 42), ("full_ft", "search", 5e-5, 42),
                                         ("full_ft", "seeds", 5e-5, 1)]  # fmt: skip
    states = Counter(
        trial.state.name for trial in optuna.load_study(study_name="full_ft:search", storage=storage).trials
    )
    # Two runs; the copies (and a trial Optuna makes when the other worker took the last waiting one
    # first) end PRUNED, unlaunched.
    assert states["COMPLETE"] == 2 and states["PRUNED"] >= 2 and set(states) == {"COMPLETE", "PRUNED"}
    assert [trial["status"] for trial in sweep_results(config)["trials"]] == [
        "complete"
    ] * 3  # the copies: not trials


@pytest.mark.slow
def test_ctrl_c_stops_every_workers_trial_as_interrupted_and_the_same_command_resumes(tmp_path, capsys):
    config = make_config(tmp_path, recipes={"full_ft": {"learning_rate": [2e-5, 5e-5, 1e-4]}}, seeds=[1])

    class Sleeping(SweepStandIn):
        """Each trial a real process (`sleep`), as a recipe's launch is: Ctrl-C must stop it."""

        def __call__(self, trial, config):
            process = subprocess.Popen(["sleep", "30"])
            if process.wait() != 0:  # stopped
                return Outcome("failed", "killed", exit_code=process.returncode)
            return super().__call__(trial, config)

    # Ctrl-C reaches the sweep as Python's KeyboardInterrupt, as in a fresh `recipes-lib sweep` process;
    # an earlier test in this worker process may have left another SIGINT handler installed. Sent to the
    # main thread itself: os.kill may hand it to another thread, leaving the main one blocked in a wait.
    handler_before = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(3.0, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    try:
        code = run_sweep(config, launch=Sleeping(), preflight=no_budget, draw=False, workers=Workers(2))
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, handler_before)
    assert code == 130, f"not stopped (the SIGINT handler before this test: {handler_before!r})"
    assert "run the same command to resume" in capsys.readouterr().out
    assert Counter(json_trials(config)) == {"interrupted": 2}  # both running trials, neither failed
    again = SweepStandIn()
    assert run_sweep(config, launch=again, preflight=no_budget, draw=False, workers=Workers(2)) == 0
    assert sorted(lr for _, phase, lr, _ in again.launched if phase == "search") == [2e-5, 5e-5, 1e-4]


def json_trials(config) -> list[str]:
    """The status of every trial in the study, read with Optuna (no report is written when interrupted)."""
    import optuna

    from recipes_workbench.sweep.study import status_of, sweep_trials

    storage = optuna.storages.RDBStorage(f"sqlite:///{Path(config.output_dir).resolve()}/sweep.db")
    return [status_of(trial) for trial in sweep_trials(storage) if trial.user_attrs.get("phase")]


# --- the command line and bad values -------------------------------------------------------------------------


def test_workers_below_one_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config_values(tmp_path)))
    assert cli_main(["sweep", str(path), "--workers", "0", "--dry_run"]) == 2
    (line,) = project_lines(capsys.readouterr().err)
    assert line.startswith("error: --workers is 0; give how many trials run at once")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("nosuchdb://host/db", "is not a database URL Optuna can open"),
        ("not a url", "is not a database URL Optuna can open"),
    ],
)
def test_a_bad_storage_url_is_refused_in_one_paragraph_naming_it(tmp_path, capsys, url, expected):
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config_values(tmp_path)))
    assert cli_main(["sweep", str(path), "--storage", url, "--dry_run"]) == 2
    (line,) = project_lines(capsys.readouterr().err)
    assert f"--storage {url} " in line and expected in line and "postgresql://USER:PASSWORD@HOST" in line


def test_a_missing_database_driver_names_the_package_to_install(tmp_path, capsys, monkeypatch):
    for module in ("psycopg", "psycopg2"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config_values(tmp_path)))
    url = "postgresql://sweeper:secret@db.example:5432/sweeps"
    assert cli_main(["sweep", str(path), "--storage", url, "--dry_run"]) == 2
    (line,) = project_lines(capsys.readouterr().err)
    assert "needs the database driver psycopg" in line and "pip install" in line
    assert "recipes-lib[postgres]" in line and "secret" not in line  # the password is not printed


# --- a real PostgreSQL server, two worker processes ------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of the 'postgres' extra's pgserver (its own binaries; as root it runs them as
    a system user 'pgserver' it creates), in a directory of its own, stopped and removed at the end."""
    try:
        import pgserver
        import psycopg2  # noqa: F401 - the driver the URL below needs (SQLAlchemy 2.0's default)
    except ImportError as error:
        if sys.version_info >= (3, 13):
            pytest.skip("pgserver ships no wheel for Python 3.13 or later (0.1.4, its newest, stops at 3.12)")
        if os.environ.get("CI"):
            raise  # CI installs the 'postgres' extra (in 'test' and 'dev'): the test must run there
        pytest.skip(f"{error.name} is not installed: pip install -e '.[postgres]' (CI installs it)")
    server = pgserver.get_server(Path(tempfile.mkdtemp(prefix="recipes-pg-")), cleanup_mode="delete")
    yield server
    server.cleanup()


def database(server, name: str) -> str:
    """A fresh database on the server, and its psycopg2 URL (the driver every SQLAlchemy 2.x knows)."""
    server.psql(f"CREATE DATABASE {name};")
    return server.get_uri(name).replace("postgresql://", "postgresql+psycopg2://", 1)


def run_workers(tmp_path: Path, request: dict, count: int = 2) -> tuple[list[dict], list[str]]:
    """`count` worker processes on one request, started together; (the ledger's launches, their outputs)."""
    ledger = tmp_path / "ledger.jsonl"
    path = tmp_path / "request.json"
    path.write_text(json.dumps({**request, "ledger": str(ledger)}))
    paths = [str(REPO_ROOT / "src"), str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    processes = [
        subprocess.Popen([sys.executable, "-m", "tests.helpers.parallel_worker", str(path)], cwd=REPO_ROOT,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(count)
    ]  # fmt: skip
    outputs = [process.communicate(timeout=300)[0] for process in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
    return [json.loads(line) for line in ledger.read_text().splitlines()], outputs


@pytest.mark.slow
def test_two_worker_processes_drain_one_study_on_postgresql_with_no_trial_run_twice(tmp_path, postgres):
    # A sweep: 3 + 2 search trials, then each chosen rate at 2 more seeds, by two processes at once.
    values = config_values(tmp_path / "shared", seeds=[1, 2])
    launches, outputs = run_workers(tmp_path, {"kind": "sweep", "config": values, "seconds": 1.0,
                                               "storage": database(postgres, "sweep")})  # fmt: skip
    trials = [tuple(launch["trial"]) for launch in launches]
    assert len(trials) == len(set(trials)) == 9  # every trial once
    assert len({launch["pid"] for launch in launches}) == 2  # both workers ran trials
    assert sum("results: " in output for output in outputs) == 1  # the report written once ...
    assert sum("another worker writes" in output for output in outputs) == 1
    alone = make_config(tmp_path / "alone", seeds=[1, 2])
    run_sweep(alone, launch=SweepStandIn(), preflight=no_budget, draw=False)
    assert comparable(sweep_results(make_config(tmp_path / "shared", seeds=[1, 2]))) == comparable(
        sweep_results(alone)
    )  # ... and it is one worker's

    # A cross-validation: 5 folds, the same way.
    train = single_label_file(tmp_path, rows=40)
    settings = settings_for(tmp_path / "cv", train, folds=5)
    request = {"kind": "crossval", "seconds": 1.0, "storage": database(postgres, "crossval"),
               "settings": {**settings.__dict__, "data": [list(item) for item in settings.data]}}  # fmt: skip
    (tmp_path / "workers").mkdir()
    launches, outputs = run_workers(tmp_path / "workers", request)
    assert sorted(launch["trial"] for launch in launches) == [0, 1, 2, 3, 4]
    assert len({launch["pid"] for launch in launches}) == 2
    assert sum("Out-of-fold predictions:" in output for output in outputs) == 1
    assert [row["row"] for row in read_oof(settings)] == list(range(40))
