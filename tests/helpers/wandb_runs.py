"""W&B in the tests: an environment isolated from any real key or setting, and offline runs read back
with `wandb leet inspect`, as a user would read them.

`wandb leet inspect --summary --json RUN` gives the run's name, tags, config and summary; its
group and job_type are only in the raw records (`wandb leet inspect --json RUN`, the "run" record),
and so is the history.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Shaped like a real key (40+ word characters), so wandb accepts it and would use it if it could.
FAKE_API_KEY = "local0fake0key0for0tests0" + "7" * 24


def wandb_cli() -> str:
    beside_python = Path(sys.executable).with_name("wandb")
    return str(beside_python) if beside_python.exists() else shutil.which("wandb")


def isolated_wandb_env(root: Path, **overrides: str) -> dict[str, str]:
    """This environment without any W&B key, mode or setting; runs, caches and staging go under root."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    env.update(
        WANDB_DIR=str(root),
        WANDB_CONFIG_DIR=str(root / "config"),  # no settings file holding a key or a mode
        WANDB_CACHE_DIR=str(root / "cache"),
        WANDB_DATA_DIR=str(root / "data"),
        NETRC=str(root / "netrc"),  # does not exist: no ~/.netrc key either
    )
    env.update(overrides)
    return env


def offline_wandb_in_the_default_dir(monkeypatch, root: Path) -> None:
    """Offline W&B isolated as above but with no WANDB_DIR, so the code under test chooses where a run's
    files go (a recipe: its output_dir/wandb; compare --wandb: beside the runs)."""
    for key in [key for key in os.environ if key.startswith("WANDB_")]:
        monkeypatch.delenv(key)
    for key, value in isolated_wandb_env(root, WANDB_MODE="offline").items():
        if (key.startswith("WANDB_") and key != "WANDB_DIR") or key == "NETRC":
            monkeypatch.setenv(key, value)


def offline_runs(root: Path) -> list[Path]:
    """The offline run directories W&B wrote under WANDB_DIR=root, oldest first."""
    return sorted((root / "wandb").glob("offline-run-*"))


@dataclass
class LoggedRun:
    """One offline W&B run, read back: what it logged, by key."""

    run_dir: Path
    summary: dict  # `wandb leet inspect --summary --json`
    records: list[dict]  # `wandb leet inspect --json`

    @property
    def run_record(self) -> dict:
        return next(record["run"] for record in self.records if record["type"] == "run")

    @property
    def history_keys(self) -> set[str]:
        return {
            key for record in self.records if record["type"] == "history" for key in record["history"]["item"]
        }

    @property
    def summary_keys(self) -> set[str]:
        """Every key the summary was given, a null one included (leet's summary view leaves those out)."""
        updates = [
            record["summary"].get("update") or {} for record in self.records if record["type"] == "summary"
        ]
        return {key for update in updates for key in update} | set(self.summary["summary"])

    @property
    def logged_keys(self) -> set[str]:
        return self.history_keys | self.summary_keys

    def table(self, key: str) -> dict:
        """A logged W&B table's columns and data, from its file in the run directory."""
        reference = self.summary["summary"][key]
        assert reference["_type"] == "table-file", reference
        return json.loads((self.run_dir / "files" / reference["path"]).read_text())

    @property
    def chart_specs(self) -> dict:
        """{key: panel config} of the custom charts the run logged (config updates `_wandb.visualize.KEY`)."""
        prefix = "_wandb.visualize."
        updates = [
            record["config"].get("update") or {} for record in self.records if record["type"] == "config"
        ]
        return {
            key.removeprefix(prefix): value["panel_config"]
            for update in updates
            for key, value in update.items()
            if key.startswith(prefix)
        }


def read_run(run_dir: Path) -> LoggedRun:
    inspect = [wandb_cli(), "leet", "inspect"]
    summary = subprocess.run([*inspect, "--summary", "--json", str(run_dir)], capture_output=True, text=True)
    assert summary.returncode == 0, summary.stderr
    records = subprocess.run([*inspect, "--json", str(run_dir)], capture_output=True, text=True)
    assert records.returncode == 0, records.stderr
    return LoggedRun(
        run_dir=run_dir,
        summary=json.loads(summary.stdout),
        records=[json.loads(line) for line in records.stdout.splitlines() if line.strip()],
    )
