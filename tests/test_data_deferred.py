"""What only some data uses loads where a run uses it (issue #56's runtime bound): a run on one CSV of string
classes loads none of multi-label labels, scores, --label_names_file, a test split's labels, a Hub
dataset's loading or the advice on texts cut short; each loads with the data that needs it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.data import write_csv
from tests.helpers.repo import REPO_ROOT

# Loads each case's data in turn in one process, and prints the data modules loaded after each.
LOADED = """
import json, sys
from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.loading import load_classification_data
from recipes_lib.data.long_text import log_truncation, truncation_report
for options in json.loads(sys.argv[1]):
    lengths = options.pop("lengths", [10, 12])  # max_seq_length 16: [10, 20] cuts half the examples
    load_classification_data(DataArguments(**options))
    log_truncation({"train": truncation_report(lengths, 2, 16, 512)}, DataArguments())
    print(json.dumps(sorted(m for m in sys.modules if m.startswith("recipes_lib.data."))))
"""
STRINGS = ["warm", "cool", "warm", "cool"]
# What each case's data needs beyond the first's, in the order the cases run.
CASES = [
    (STRINGS, {}, None),
    (["warm;cool", "cool", "warm", "cool"], {}, "multi_label"),
    (["0.5", "1.5", "2.25", "3.0"], {}, "scores"),
    (STRINGS, {"test_file": "train{number}.csv"}, "hidden_labels"),
    (["0", "1", "0", "1"], {"label_names_file": "names.txt"}, "label_names"),
    (STRINGS, {"lengths": [10, 20]}, "length_advice"),
]
DEFERRED = {f"recipes_lib.data.{name}" for name in ("hub_dataset", *(case[2] for case in CASES[1:]))}


def test_one_csv_of_string_classes_loads_none_of_them_and_each_loads_with_its_data(tmp_path):
    (tmp_path / "names.txt").write_text("cool\nwarm\n")
    cases = []
    for number, (labels, options, _) in enumerate(CASES):
        train = tmp_path / f"train{number}.csv"
        write_csv(train, [(f"text {i}", label) for i, label in enumerate(labels)])
        files = {
            key: str(tmp_path / v.format(number=number))
            for key, v in options.items()
            if key.endswith("_file")
        }
        cases.append({**options, "train_file": str(train), "validation_file": str(train), **files})
    command = [sys.executable, "-c", LOADED, json.dumps(cases)]
    output = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    loaded = [set(json.loads(line)) for line in output.splitlines()[-len(CASES) :]]
    assert "recipes_lib.data.labels" in loaded[0]  # the check saw the data path
    assert DEFERRED.isdisjoint(loaded[0]), sorted(DEFERRED & loaded[0])
    for (labels, _, module), before, after in zip(CASES[1:], loaded[:-1], loaded[1:], strict=True):
        assert after - before == {f"recipes_lib.data.{module}"}, (labels, module, sorted(after - before))
