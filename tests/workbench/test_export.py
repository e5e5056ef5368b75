"""`recipes-lib export`: ONNX (and int8) of a finished run, the quality gate, and predict from the export.

The runs are two optimizer steps of the recipe's own main() on a tiny BERT whose weights are drawn
larger than BERT's initialisation (conftest's `lively_bert`, as in test_predict.py), so that rows get
probabilities that differ by around 1e-2 and a model that is not the PyTorch one cannot agree by chance. One export takes
10-80 s on 2 cores (torch.export and onnxscript dominate), so the fast tests share one export;
every family, and LoRA, are `slow`.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from recipes_workbench.export import MIN_INT8_AGREEMENT
from tests.helpers.data import learnable_rows, read_jsonl, write_csv
from tests.helpers.models import FAMILIES, build_tiny_family, liven
from tests.helpers.runs import QUICK, run_args, run_in_process

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

TOLERANCE = 1e-5
# A tiny random model's int8 copy moves a close row's decision now and then: one of 24 rows is 4.17 points.
# The fp32 gate (99% agreement, 0.5 points) holds as shipped; the int8 figures are reported and checked loosely.
TINY_INT8_DROP = "50"
# ... and its agreement and speed are not those of a real model (a 2-layer model of width 32 gains
# little from int8 matmuls): the branches are driven on known figures below instead.
TINY_INT8_OPTIONS = {
    "max_metric_drop": float(TINY_INT8_DROP),
    "min_int8_agreement": 0.5,
    "min_int8_speedup": 0,
}
TINY_INT8_GATE = (
    "--max_metric_drop",
    TINY_INT8_DROP,
    "--min_int8_agreement",
    "0.5",
    "--min_int8_speedup",
    "0",
)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("export-data")
    return {
        "train": write_csv(directory / "train.csv", learnable_rows(64, seed=1)),
        "validation": write_csv(directory / "validation.csv", learnable_rows(24, seed=2)),
    }


def _train(recipe: str, model: Path, data: dict[str, Path], output_dir: Path, *extra: str) -> Path:
    # The gate reads the whole validation file, as the run did. 48 steps at 2e-3: a model that learnt the
    # task, since the gate will not judge one no better than a constant predictor (issue #50).
    learns = {**QUICK, "steps": 48, "learning_rate": "2e-3", "max_eval_samples": None}
    run_in_process(recipe, run_args(model, data, output_dir, "--text_column_names", "text", *extra, **learns))
    return output_dir


@pytest.fixture(scope="module")
def exported_run(lively_bert, data, tmp_path_factory) -> tuple[Path, int, str]:
    """A full_ft run exported with --quantize int8 through the command line: (run dir, exit code, stdout)."""
    import contextlib
    import io

    from recipes_workbench.cli.main import main

    run_dir = _train("full_ft", lively_bert, data, tmp_path_factory.mktemp("full_ft"))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["export", str(run_dir), "--quantize", "int8", *TINY_INT8_GATE])
    return run_dir, code, stdout.getvalue()


def _predict(run_dir, input_file, **options):
    from recipes_workbench.tools.predict import predict

    return predict(run_dir, input_file, progress=False, **options)


def assert_same_rows(actual: list[dict], expected: list[dict], tolerance: float = TOLERANCE) -> None:
    assert [row["prediction"] for row in actual] == [row["prediction"] for row in expected]
    for got, want in zip(actual, expected, strict=True):
        assert got["probabilities"].keys() == want["probabilities"].keys()
        for name, probability in want["probabilities"].items():
            assert got["probabilities"][name] == pytest.approx(probability, abs=tolerance)


# --- a good export -------------------------------------------------------------------------------------


def test_an_export_passes_the_gate_and_carries_what_predict_needs(exported_run):
    run_dir, code, stdout = exported_run
    export_dir = run_dir / "export"
    assert code == 0, stdout
    assert not (run_dir / "export.failed").exists()
    assert not list(run_dir.glob(".export-*"))  # the temporary directory was renamed, not left behind
    for name in ("model.onnx", "model.int8.onnx", "config.json", "tokenizer.json", "export_config.json"):
        assert (export_dir / name).is_file(), name
    assert not (export_dir / "results.json").exists()  # not a run: `compare` and `show` do not list it
    report = json.loads((export_dir / "export_report.json").read_text())
    fp32, int8 = report["models"]["fp32"], report["models"]["int8"]
    assert report["passed"] is True and report["exporter"] in ("dynamo", "torchscript")
    assert fp32["rows"] == 24 and fp32["agreement"] == 1.0 and fp32["max_abs_logit_difference"] < 1e-4
    results = json.loads((run_dir / "results.json").read_text())
    assert fp32["pytorch"]["accuracy"] == pytest.approx(
        results["eval_accuracy"]
    )  # the rows the run evaluated
    assert fp32["onnx"]["accuracy"] == pytest.approx(fp32["pytorch"]["accuracy"])
    assert 0.5 <= int8["agreement"] <= 1 and int8["metric_drop_points"] <= float(TINY_INT8_DROP)
    assert int8["size_bytes"] < fp32["size_bytes"]
    assert "agreement 100.00%" in stdout
    latency = report["latency"]
    assert (
        latency["threads"] == 1
        and latency["rows"] == 24
        and set(latency["median_ms"]) == {"pytorch", "fp32", "int8"}
    )
    assert all(ms > 0 for ms in latency["median_ms"].values()) and "Batch-1 latency, 1 thread" in stdout
    settings = json.loads((export_dir / "export_config.json").read_text())
    assert settings["run"]["config"]["max_seq_length"] == 32 and settings["long_text"] == "truncate"


def test_the_model_card_gets_the_exports_gate_figures(exported_run):
    """The run's README.md, rewritten by the export: one row per exported model, from export_report.json."""
    from recipes_lib.tracking.model_card import EXPORT_REPORT
    from recipes_workbench.export.bundle import EXPORT_SUBDIR, REPORT_FILE

    run_dir = exported_run[0]
    assert EXPORT_REPORT == (EXPORT_SUBDIR, REPORT_FILE)  # where the card looks is where export writes
    report = json.loads((run_dir / EXPORT_SUBDIR / REPORT_FILE).read_text())
    card = (run_dir / "README.md").read_text()
    section = card.split("## ONNX export")[1].split("\n## ")[0]
    fp32, int8 = report["models"]["fp32"], report["models"]["int8"]
    assert f"| fp32 | `model.onnx` | {fp32['size_bytes'] / 2**20:.1f} MiB | 100.00% of 24 | " in section
    assert (
        f"{int8['onnx']['accuracy']:.4f} ({int8['pytorch']['accuracy']:.4f}) | {int8['metric_drop_points']:.2f} |"
        in section
    )
    assert "| int8 (signed weights) | `model.int8.onnx` |" in section
    assert str(run_dir) not in card  # file names only: the card is public once pushed


def test_the_onnx_model_takes_any_batch_and_sequence_length(exported_run):
    import onnx

    run_dir, _, _ = exported_run
    graph = onnx.load(str(run_dir / "export" / "model.onnx")).graph
    for tensor in graph.input:
        dims = tensor.type.tensor_type.shape.dim
        assert [bool(dim.dim_param) for dim in dims] == [True, True], tensor.name  # symbolic, not fixed


@pytest.mark.parametrize("model_file", ["", "model.onnx"])
def test_predict_from_the_export_gives_the_runs_own_predictions(exported_run, data, model_file):
    run_dir, _, _ = exported_run
    expected = read_jsonl(run_dir / "eval_predictions.jsonl")
    warm = [row["probabilities"]["warm"] for row in expected]
    assert max(warm) - min(warm) > 100 * TOLERANCE  # the rows tell apart
    assert_same_rows(_predict(run_dir / "export" / model_file, data["validation"], batch_size=5), expected)


def test_predict_from_the_int8_export_stays_close(exported_run, data):
    run_dir, _, _ = exported_run
    rows = _predict(run_dir / "export" / "model.int8.onnx", data["validation"])
    expected = read_jsonl(run_dir / "eval_predictions.jsonl")
    assert len(rows) == len(expected)
    differences = [
        abs(got["probabilities"][name] - want["probabilities"][name])
        for got, want in zip(rows, expected, strict=True)
        for name in want["probabilities"]
    ]
    # Quantized: not the same numbers, but the same answers. The export tests' model learnt (issue #50's gate
    # refuses a collapsed one), so its probabilities are sharp and int8 moves some of them far: measured on a
    # 2-core AVX2 EPYC (no VNNI), max differences 0.098 to 0.227 over 4 runs, medians 0.018 to 0.056, and
    # 23 or 24 of the 24 rows given PyTorch's label. (How far a broken export falls was not measured.)
    assert max(differences) > 0
    assert statistics.median(differences) < 0.1
    agreeing = sum(got["prediction"] == want["prediction"] for got, want in zip(rows, expected, strict=True))
    assert agreeing >= 0.9 * len(rows), f"{agreeing} of {len(rows)} rows predicted as PyTorch predicts them"


@pytest.mark.parametrize("long_text", ["head_tail", "sliding_window"])
def test_predict_from_the_export_handles_long_texts_as_pytorch_does(exported_run, data, tmp_path, long_text):
    """The ONNX model does not depend on --long_text: the run's settings (in results.json, carried into
    export_config.json) decide how a long text is cut. Both copies are set to 8 tokens, so every text is cut."""
    run_dir, _, _ = exported_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    settings = {"long_text": long_text, "max_seq_length": 8, "stride": 2}
    results = json.loads((copy / "results.json").read_text())
    results["config"].update(settings)
    (copy / "results.json").write_text(json.dumps(results))
    exported = json.loads((copy / "export" / "export_config.json").read_text())
    exported["run"]["config"].update(settings)
    (copy / "export" / "export_config.json").write_text(json.dumps(exported))

    from_pytorch = _predict(copy, data["validation"], batch_size=4)
    from_onnx = _predict(copy / "export", data["validation"], batch_size=7)
    assert len(from_onnx) == 24  # one per document, not per window
    assert_same_rows(from_onnx, from_pytorch)
    truncated = _predict(run_dir, data["validation"])
    assert [row["probabilities"] for row in from_onnx] != [row["probabilities"] for row in truncated]


# --- the gate refusing a damaged export ----------------------------------------------------------------


def _damaging_exporter():
    """export_onnx, then the classifier's weights in the ONNX file negated: a model that is not the PyTorch
    one (each of the two classes' logits changes sign, so most decisions flip)."""
    import onnx
    from onnx import numpy_helper

    from recipes_workbench.export import onnx_model

    real = onnx_model.export_onnx

    def export_then_damage(model, tokenizer, path):
        exporter = real(model, tokenizer, path)
        proto = onnx.load(str(path))
        head = next(tensor for tensor in proto.graph.initializer if tensor.name.endswith("classifier.weight"))
        head.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(head), head.name))
        onnx.save(proto, str(path))
        return exporter

    return mock.patch("recipes_workbench.export.command.export_onnx", export_then_damage)


def test_the_gate_refuses_a_damaged_export(exported_run, data, tmp_path, capsys):
    from recipes_lib.errors import ConfigError
    from recipes_workbench.cli.main import main

    run_dir, _, _ = exported_run
    fresh = tmp_path / "fresh"  # the same run, never exported
    shutil.copytree(run_dir, fresh, ignore=shutil.ignore_patterns("export"))
    with _damaging_exporter():
        code = main(["export", str(fresh)])
    error = capsys.readouterr().err
    assert code == 1
    assert (
        "failed its quality gate" in error and "agrees with PyTorch on" in error and "99% required" in error
    )
    assert (fresh / "export.failed" / "model.onnx").is_file() and not (fresh / "export").exists()
    report = json.loads((fresh / "export.failed" / "export_report.json").read_text())
    assert report["passed"] is False and report["models"]["fp32"]["agreement"] < 0.99
    with pytest.raises(ConfigError, match="failed its quality gate"):
        _predict(fresh / "export.failed", data["validation"])


BAD_OPTIONS = [
    ({"int8_weights": "int4"}, "--int8_weights is 'int4'; use one of signed, unsigned."),
    ({"quantize": "int4"}, "--quantize is 'int4'; the one quantization offered is int8 (dynamic, ONNX Runtime)."),
    ({"max_metric_drop": -1}, "--max_metric_drop is -1; give the points the metric may lose, 0 or more."),
    ({"batch_size": 0}, "--batch_size is 0; it must be a positive integer."),
    ({"min_int8_agreement": 1.5}, "--min_int8_agreement is 1.5; give the share of rows (0 to 1) on which the int8 "
     "model must predict as PyTorch does."),
    ({"min_int8_speedup": -1}, "--min_int8_speedup is -1; give how many times faster than fp32 int8 must be at "
     "batch 1 (0 turns the check off)."),
]  # fmt: skip


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_a_bad_export_option_is_refused_by_name_before_the_run_is_read(tmp_path, options, message):
    from recipes_lib.errors import ConfigError
    from recipes_workbench.export.command import export_run

    # No run there: the option's paragraph comes first, not "The run directory ... does not exist".
    with pytest.raises(ConfigError) as refused:
        export_run(tmp_path / "no-run", **options)
    assert str(refused.value) == message


def test_the_command_line_passes_every_export_option_through(tmp_path, capsys):
    from recipes_workbench.cli.main import main

    assert main(["export", str(tmp_path / "no-run"), "--min_int8_speedup", "-1"]) == 2
    # argparse's float: -1.0
    assert BAD_OPTIONS[-1][1].replace("-1;", "-1.0;") in capsys.readouterr().err


# --- every branch of the gate, driven both ways ---------------------------------------------------------


def _synthetic(reference_predictions, exported_predictions, labels):
    """gate.compare on two-class logits that predict the given classes (no model): the figures are known."""
    import numpy as np

    from recipes_workbench.export.gate import Decider, GateRows, compare

    def logits(predictions):
        return np.array([[1.0, -1.0] if p == 0 else [-1.0, 1.0] for p in predictions], dtype=np.float32)

    rows = GateRows(None, np.array(labels), None, "mean", "four rows")
    return compare(
        logits(reference_predictions),
        logits(exported_predictions),
        rows,
        Decider("single_label_classification", ["a", "b"]),
    )


def test_the_metric_drop_is_pytorchs_metric_less_the_exports():
    worse = _synthetic([0, 0, 1, 0], [0, 1, 1, 0], labels=[0, 0, 1, 1])  # PyTorch 75%, the export 50%
    assert worse["metric_drop_points"] == pytest.approx(25.0)
    assert worse["agreement"] == 0.75 and worse["disagreeing_rows"] == 1
    better = _synthetic([0, 1, 1, 0], [0, 0, 1, 0], labels=[0, 0, 1, 1])  # the export gains: a negative drop
    assert better["metric_drop_points"] == pytest.approx(-25.0)


def test_the_gate_holds_each_model_to_max_metric_drop_and_its_agreement():
    from recipes_workbench.export.gate import verdict

    worse = _synthetic([0, 0, 1, 0], [0, 1, 1, 0], labels=[0, 0, 1, 1])  # 25 points lost, 75% agreement
    anything = {"fp32": 0.0, "int8": 0.0}
    assert verdict({"int8": worse}, 25.5, anything) == []
    [failure] = verdict({"int8": worse}, 24.5, anything)
    assert "int8 model's accuracy is 25.00 points below" in failure and "--max_metric_drop 24.5" in failure
    better = _synthetic([0, 1, 1, 0], [0, 0, 1, 0], labels=[0, 0, 1, 1])
    assert verdict({"int8": better}, 0, anything) == []  # gaining accuracy is no drop
    # Agreement: each model against its own floor (fp32 99% and int8 MIN_INT8_AGREEMENT by default).
    assert verdict({"int8": worse}, 100, {"int8": 0.75}) == []
    [failure] = verdict({"int8": worse}, 100, {"int8": 0.8})
    assert (
        "int8 model agrees with PyTorch on 75.00% of the 4 rows (1 differ)" in failure
        and "80% required" in failure
    )
    defaults = verdict({"fp32": worse, "int8": worse}, 100)
    assert len(defaults) == 2 and "fp32 model agrees" in defaults[0] and "int8 model agrees" in defaults[1]


def test_the_gate_keeps_int8_only_when_it_is_faster_than_fp32():
    from recipes_workbench.export.gate import verdict

    same = _synthetic([0, 0, 1, 1], [0, 0, 1, 1], labels=[0, 0, 1, 1])
    results = {"fp32": same, "int8": same}
    slower = {"threads": 1, "rows": 4, "median_ms": {"pytorch": 9.0, "fp32": 4.0, "int8": 5.0}}
    faster = {"threads": 1, "rows": 4, "median_ms": {"pytorch": 9.0, "fp32": 4.0, "int8": 2.0}}
    assert verdict(results, 0.5, latency=faster) == []
    [failure] = verdict(results, 0.5, latency=slower)
    assert "int8 model is not faster than the fp32 one at batch 1" in failure and "0.80x" in failure
    assert verdict(results, 0.5, latency=slower, min_int8_speedup=0) == []  # the check turned off
    [failure] = verdict(results, 0.5, latency=faster, min_int8_speedup=2.5)  # 2x is not 2.5x
    assert "2.00x" in failure


def _copying_exporter(run_dir: Path):
    """export_onnx replaced by a copy of the run's export/model.onnx: the gate runs, the slow export does not."""
    from recipes_workbench.export.onnx_model import files_of

    def copy(model, tokenizer, path):
        for source in files_of(run_dir / "export" / "model.onnx"):
            shutil.copyfile(source, Path(path).with_name(source.name))
        return "dynamo"

    return mock.patch("recipes_workbench.export.command.export_onnx", copy)


def _flipping_quantizer():
    """Int8Quantizer replaced by one that writes a damaged copy of the fp32 model: the classifier's weight
    and bias negated, so every two-class decision flips (agreement 0%). It offers no node to keep in fp32."""
    import onnx
    from onnx import numpy_helper

    class Flipping:
        def __init__(self, source, scratch, weights="signed", model_config=None):
            self.source = source

        def candidates(self):
            return []

        def quantize(self, int8_path, nodes_to_exclude=()):
            proto = onnx.load(str(self.source))
            for tensor in proto.graph.initializer:
                if tensor.name.endswith(("classifier.weight", "classifier.bias")):
                    tensor.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(tensor), tensor.name))
            onnx.save(proto, str(int8_path))
            return {"weights": "flipped", "fused_operators": {}, "nodes_kept_fp32": []}

    return mock.patch("recipes_workbench.export.command.Int8Quantizer", Flipping)


@pytest.fixture
def gate_case(exported_run, data, tmp_path):
    """A fresh copy of the exported run, and held-out rows labelled with the PyTorch model's own predictions
    but for the last row, labelled with the other class: PyTorch scores 23 of 24, the flipped int8 copy 1
    of 24, so it loses 22 of 24 rows' worth: 91.67 points (and agrees on none)."""
    import csv

    run_dir = exported_run[0]
    fresh = tmp_path / "fresh"
    shutil.copytree(run_dir, fresh, ignore=shutil.ignore_patterns("export"))
    with open(data["validation"], newline="") as handle:
        texts = [row["text"] for row in csv.DictReader(handle)]
    predicted = read_jsonl(run_dir / "eval_predictions.jsonl")
    predictions = [row["prediction"] for row in predicted]
    [other] = set(predicted[-1]["probabilities"]) - {predictions[-1]}
    predictions[-1] = other
    eval_file = write_csv(tmp_path / "as_pytorch.csv", list(zip(texts, predictions, strict=True)))
    return run_dir, fresh, eval_file


def _export_flipped(gate_case, *options: str) -> tuple[int, dict]:
    from recipes_workbench.cli.main import main

    run_dir, fresh, eval_file = gate_case
    untraced = mock.patch(
        "recipes_workbench.export.command.export_for_int8", return_value=False
    )  # from model.onnx
    with _copying_exporter(run_dir), untraced, _flipping_quantizer():
        code = main(["export", str(fresh), "--quantize", "int8", "--eval_file", str(eval_file),
                     "--min_int8_speedup", "0", *options])  # fmt: skip
    directory = fresh / ("export" if code == 0 else "export.failed")
    return code, json.loads((directory / "export_report.json").read_text())


def test_the_metric_drop_branch_passes_a_wide_allowance_and_refuses_a_tight_one(gate_case, capsys):
    code, report = _export_flipped(gate_case, "--max_metric_drop", "92", "--min_int8_agreement", "0")
    int8 = report["models"]["int8"]
    assert int8["pytorch"]["accuracy"] == pytest.approx(23 / 24)
    assert int8["onnx"]["accuracy"] == pytest.approx(1 / 24)
    assert int8["metric_drop_points"] == pytest.approx(100 * 22 / 24)  # PyTorch's less the export's: positive
    assert int8["agreement"] == 0.0 and report["models"]["fp32"]["agreement"] == 1.0
    assert code == 0 and report["passed"], report["reason"]
    code, report = _export_flipped(gate_case, "--max_metric_drop", "91.5", "--min_int8_agreement", "0")
    assert code == 1
    assert report["reason"].startswith("the int8 model's accuracy is 91.67 points below PyTorch's")
    assert "more than --max_metric_drop 91.5" in capsys.readouterr().err


def test_the_agreement_branch_refuses_int8_that_predicts_otherwise(gate_case, capsys):
    # Within --max_metric_drop, held to the default --min_int8_agreement.
    code, report = _export_flipped(gate_case, "--max_metric_drop", "92")
    assert code == 1 and report["min_int8_agreement"] == MIN_INT8_AGREEMENT
    assert report["reason"] == (
        f"the int8 model agrees with PyTorch on 0.00% of the 24 rows (24 differ), {100 * MIN_INT8_AGREEMENT:.2f} "
        f"points below the {100 * MIN_INT8_AGREEMENT:g}% required"
    )
    assert "int8 model agrees with PyTorch on 0.00%" in capsys.readouterr().err
    # The sensitivity pass ran (and found no node to keep): the report keeps the every-node int8 figures.
    assert report["int8"]["every_node_int8"]["agreement"] == 0.0


def test_the_speed_branch_refuses_int8_slower_than_fp32(gate_case, capsys):
    from recipes_workbench.cli.main import main

    run_dir, fresh, _ = gate_case
    slower = {"threads": 1, "rows": 24, "median_ms": {"pytorch": 9.0, "fp32": 4.0, "int8": 5.0}}
    with (
        _copying_exporter(run_dir),
        mock.patch("recipes_workbench.export.command.gate_latency", return_value=slower),
    ):
        code = main(["export", str(fresh), "--quantize", "int8", "--max_metric_drop", TINY_INT8_DROP,
                     "--min_int8_agreement", "0"])  # fmt: skip
    assert code == 1 and "int8 model is not faster than the fp32 one at batch 1" in capsys.readouterr().err
    assert json.loads((fresh / "export.failed" / "export_report.json").read_text())["latency"] == slower


def test_the_sensitivity_pass_keeps_the_most_damaging_nodes_in_fp32_until_int8_passes(tmp_path):
    """A quantizer whose nodes each do a known damage: "b" most, then "c"; "a" none. The pass ranks them by
    the damage each does alone and keeps them in fp32, most damaging first, until the gate passes."""
    import numpy as np

    from recipes_workbench.export.sensitivity import keep_sensitive_nodes, rank_nodes

    damage = {"a": 0.0, "b": 3.0, "c": 1.0}

    class Quantizer:
        def candidates(self):
            return list(damage)

        def quantize(self, path, nodes_to_exclude=()):
            Path(path).write_text(
                json.dumps(sorted(set(damage) - set(nodes_to_exclude)))
            )  # the nodes in int8
            return {"nodes_kept_fp32": list(nodes_to_exclude)}

    def logits_of(path):  # each node in int8 moves every logit by its damage
        return np.full((4, 2), sum(damage[node] for node in json.loads(Path(path).read_text())))

    ranked = rank_nodes(Quantizer(), tmp_path, logits_of, np.zeros((4, 2)))
    assert ranked == [("b", 9.0), ("c", 1.0), ("a", 0.0)]  # mean squared difference, most damaging first

    def gate_of(path):
        return {"in_int8": json.loads(Path(path).read_text()), "agreement": 1.0, "metric_drop_points": 0.0}

    result, recipe = keep_sensitive_nodes(Quantizer(), tmp_path / "int8.onnx", ranked, gate_of,
                                          passes=lambda result: "c" not in result["in_int8"])  # fmt: skip
    assert recipe["nodes_kept_fp32"] == ["b", "c"] and result["in_int8"] == ["a"]
    result, recipe = keep_sensitive_nodes(
        Quantizer(), tmp_path / "int8.onnx", ranked, gate_of, lambda r: True
    )
    assert recipe["nodes_kept_fp32"] == ["b"]  # the fewest: it stops at the first that passes
    # Issue #55: when even the search's best choice (every ranked node kept) fails, nothing it would try can
    # pass: one try, not one per node, and the record says why it stopped.
    tries = []

    def counted(path):
        tries.append(path)
        return gate_of(path)

    result, recipe = keep_sensitive_nodes(
        Quantizer(), tmp_path / "int8.onnx", ranked, counted, lambda r: False
    )
    assert len(tries) == 1 and recipe["nodes_kept_fp32"] == ["b", "c", "a"]
    assert recipe["search"] == "stopped: fails with all 3 most damaging nodes in fp32"


def test_a_regression_gate_judges_the_score_on_the_label_scale_and_by_the_tasks_metrics():
    """Issue #55: agreement is |score difference| within 2.5% of the training labels' range (here 1-5: ±0.1),
    and Pearson and Spearman may each lose --max_metric_drop points, MSE 4% per point of it."""
    from recipes_workbench.export.gate import Decider, GateRows, compare, verdict

    rng = np.random.default_rng(0)
    labels = rng.uniform(1, 5, 400)
    pytorch = (labels + rng.normal(0, 0.6, 400))[:, None]
    rows = GateRows(None, labels, None, "mean", "rows", label_range=4.0)
    decider = Decider("regression", ["score"])
    # bf16-sized noise (±0.016): agrees on every row, as the run's own evaluation should.
    rounded = compare(pytorch, pytorch + rng.uniform(-0.016, 0.016, (400, 1)), rows, decider)
    assert rounded["agreement"] == 1.0 and rounded["agreement_within"] == pytest.approx(0.1)
    assert verdict({"int8": rounded}, 0.5) == []
    # int8-like noise of 0.08: most rows within ±0.1, and the metrics barely move.
    noisy = compare(pytorch, pytorch + rng.normal(0, 0.08, (400, 1)), rows, decider)
    assert 0.75 < noisy["agreement"] < 0.95
    [failure] = verdict({"int8": noisy}, 0.5)
    assert failure.startswith(
        "the int8 model agrees with PyTorch within ±0.1 (2.5% of the training labels' range)"
    )
    # A shift of the whole scale keeps both correlations but not the MSE.
    shifted = compare(pytorch, pytorch + 0.3, rows, decider)
    assert shifted["metric_drop_points"] == pytest.approx(0.0, abs=1e-9)
    assert any(
        "MSE is" in failure and "more than the 2% allowed" in failure
        for failure in verdict({"int8": shifted}, 0.5)
    )


@pytest.mark.slow
def test_a_failed_export_leaves_an_earlier_good_one_as_it_was(exported_run):
    from recipes_workbench.cli.main import main

    run_dir, _, _ = exported_run
    good_report = (run_dir / "export" / "export_report.json").read_bytes()
    with _damaging_exporter():
        assert main(["export", str(run_dir)]) == 1
    assert (run_dir / "export" / "export_report.json").read_bytes() == good_report
    assert (run_dir / "export.failed").is_dir()
    shutil.rmtree(run_dir / "export.failed")


def test_bad_options_fail_before_anything_is_exported(exported_run, tmp_path, capsys):
    from recipes_workbench.cli.main import main

    run_dir, _, _ = exported_run
    assert main(["export", str(run_dir), "--eval_file", str(tmp_path / "missing.csv")]) == 2
    assert "--eval_file" in capsys.readouterr().err
    assert main(["export", str(tmp_path)]) == 2
    assert "results.json" in capsys.readouterr().err
    assert not list(run_dir.glob(".export-*")) and not (tmp_path / "export").exists()


def test_the_command_shows_its_own_notes_and_only_the_libraries_warnings():
    """Its own process (logging is set up once per process): the exporter's graph optimizer logs some
    hundred INFO lines per export ("Replaced initializer ..."), which would bury the gate's figures."""
    import subprocess
    import sys

    script = (
        "import logging\n"
        "from recipes_workbench.cli.export import log_notes_to_stderr\n"
        "log_notes_to_stderr()\n"
        "logging.getLogger('onnx_ir.passes.common.initializer_deduplication').info('optimizer detail')\n"
        "logging.getLogger('onnxscript.optimizer').warning('library warning')\n"
        "logging.getLogger('recipes_workbench.export.command').info('our note')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["library warning", "our note"]


def test_the_exporters_torchvision_notes_are_dropped_and_others_kept():
    import logging

    import torch.onnx._internal.exporter._registration as registration

    from recipes_workbench.export.onnx_model import REGISTRY_LOGGER, torchvision_notes_dropped

    assert registration.logger.name == REGISTRY_LOGGER  # where torch.onnx logs them
    records = []
    handler = logging.Handler()  # on the logger itself: torch's loggers do not propagate to the root
    handler.emit = records.append
    registration.logger.addHandler(handler)
    try:
        with torchvision_notes_dropped():
            registration.logger.warning("torchvision is not installed. Skipping %s", "torchvision::nms")
            registration.logger.warning("another note")
        registration.logger.warning("torchvision is not installed. Skipping %s", "after the export")
    finally:
        registration.logger.removeHandler(handler)
    assert [record.getMessage() for record in records] == [
        "another note",
        "torchvision is not installed. Skipping after the export",  # the logger as it was, afterwards
    ]


def test_int8_is_quantized_after_pre_processing_without_its_advice(exported_run, tmp_path, caplog):
    """ONNX Runtime advises pre-processing (a root-logger warning) when a model has not had it."""
    import logging

    from recipes_workbench.export.onnx_model import Int8Quantizer

    quantizer = Int8Quantizer(exported_run[0] / "export" / "model.onnx", tmp_path / "scratch")
    with caplog.at_level(logging.INFO):
        recipe = quantizer.quantize(tmp_path / "model.int8.onnx")
    assert not [record for record in caplog.records if "pre-processing" in record.getMessage()]
    assert recipe["weights"] == "per-channel signed int8" and (tmp_path / "model.int8.onnx").is_file()
    assert recipe["fused_operators"].get("SkipLayerNormalization")  # the layer norms fuse in any graph


# --- adapters and families -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_lora_output_is_merged_on_export(lively_bert, data, tmp_path):
    from recipes_workbench.export.command import export_run

    run_dir = _train("lora", lively_bert, data, tmp_path / "lora")
    assert (run_dir / "adapter_config.json").is_file() and not (run_dir / "merged").exists()
    outcome = export_run(run_dir, progress=False)
    fp32 = outcome.report["models"]["fp32"]
    assert outcome.passed and "LoRA adapter merged" in outcome.report["exported"]
    assert fp32["agreement"] == 1.0 and fp32["max_abs_logit_difference"] < 1e-4
    assert_same_rows(
        _predict(run_dir / "export", data["validation"]), read_jsonl(run_dir / "eval_predictions.jsonl")
    )


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_exports_and_passes_the_gate(family, data, tmp_path):
    """What `recipes-lib families` shows in its ONNX export column is what this measures (export's
    ONNX_EXPORTERS, or ONNX_EXPORT_FAILURES for a family whose export fails)."""
    from recipes_workbench.export import DEFAULT_ONNX_EXPORTER, ONNX_EXPORT_FAILURES, ONNX_EXPORTERS
    from recipes_workbench.export.command import export_run

    # Livened: a tiny random family trained briefly gives every row one output, which the gate will not judge.
    model_dir = liven(build_tiny_family(family, tmp_path / "model"))
    run_dir = _train("full_ft", model_dir, data, tmp_path / "run")
    if family in ONNX_EXPORT_FAILURES:
        with pytest.raises(Exception):  # noqa: B017 - whichever error the exporters stop on
            export_run(run_dir, quantize="int8", progress=False, **TINY_INT8_OPTIONS)
        return
    outcome = export_run(run_dir, quantize="int8", progress=False, **TINY_INT8_OPTIONS)
    fp32, int8 = outcome.report["models"]["fp32"], outcome.report["models"]["int8"]
    print(
        f"{family}: {outcome.report['exporter']} exporter, fp32 logits within {fp32['max_abs_logit_difference']:.1e}; "
        f"int8 from {outcome.report['int8']['made_from']}, fused {outcome.report['int8']['fused_operators']}, "
        f"agreement {int8['agreement']:.3f}, drop {int8['metric_drop_points']:.2f}"
    )
    assert outcome.passed, outcome.failures
    assert fp32["agreement"] == 1.0 and fp32["max_abs_logit_difference"] < 1e-4
    expected = ONNX_EXPORTERS.get(family, DEFAULT_ONNX_EXPORTER)
    assert outcome.report["exporter"] == expected, "update the family's entry in export's ONNX_EXPORTERS"


# --- benchmarks/serving.py -----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_serving_benchmark_measures_every_engine_on_the_same_rows(exported_run, tmp_path):
    """Three child processes (one per engine), each importing torch: slow on 2 cores, not long."""
    import subprocess
    import sys

    from tests.helpers.repo import REPO_ROOT

    run_dir, _, _ = exported_run
    command = [sys.executable, str(REPO_ROOT / "benchmarks" / "serving.py"), str(run_dir), "--rows", "32",
               "--latency_rows", "5", "--warmup", "1", "--threads", "1", "--report_dir", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    [result] = tmp_path.glob("serving_*.json")
    record = json.loads(result.read_text())
    assert [row["engine"] for row in record["engines"]] == ["pytorch", "onnx_fp32", "onnx_int8"]
    for row in record["engines"]:
        assert row["rows"] == 32 and row["latency_rows"] == 5
        assert 0 < row["latency_ms_median"] <= row["latency_ms_p95"] and row["throughput_rows_per_s"] > 0
        assert row["size_bytes"] > 0 and row["peak_memory_bytes"] > 0
    assert record["engines"][2]["size_bytes"] < record["engines"][1]["size_bytes"]  # int8 weights
    assert record["engines"][1]["gate"]["agreement"] == 1.0
    assert {"cpu", "avx512_bf16", "versions", "date", "git_commit"} <= set(record["machine"])
    assert "ONNX Runtime int8" in done.stdout


def test_the_gate_cannot_judge_a_pytorch_model_no_better_than_a_constant():
    """Agreement with a constant model is 100% whatever the export: the gate refuses to call it good."""
    from recipes_workbench.export.gate import Decider, GateRows, against_constant, verdict

    references = np.array([0, 0, 0, 1, 0, 1, 0, 0])  # 'a' on 6 of 8 rows
    rows = GateRows(
        encoded=None, references=references, document_ids=None, window_pooling="mean", source="rows"
    )
    decider = Decider("single_label_classification", ["a", "b"])
    perfect = {"fp32": {"metric_drop_points": 0.0, "agreement": 1.0, "rows": 8, "disagreeing_rows": 0,
                        "metric": "accuracy", "pytorch": {"accuracy": 0.75}, "onnx": {"accuracy": 0.75}}}  # fmt: skip
    constant = np.tile([2.0, -1.0], (8, 1))
    check = against_constant(constant, rows, decider)
    assert check["collapsed"] and check["beats_constant_on"] == []
    assert check["best_constant"]["accuracy"] == [0.75, "always 'a'"]
    [failure] = verdict(perfect, 1.0, reference=check)
    assert failure.startswith("the gate cannot judge this export: the PyTorch model itself collapsed")
    # Outputs that vary, but the same decisions as always 'a': no better than the majority on any metric.
    leaning = np.column_stack([np.linspace(2, 3, 8), np.zeros(8)])
    check = against_constant(leaning, rows, decider)
    assert not check["collapsed"] and check["beats_constant_on"] == []
    [failure] = verdict(perfect, 1.0, reference=check)
    assert (
        "does no better than a constant predictor on these rows (accuracy 75.00 against 75.00 for always 'a'"
        in failure
    )
    assert "agreement with it proves nothing" in failure
    # A model that finds one of the two 'b' rows: better macro-F1 than any constant, so the gate judges it.
    finds_one = leaning.copy()
    finds_one[3] = [0.0, 1.0]
    check = against_constant(finds_one, rows, decider)
    assert check["beats_constant_on"] == ["accuracy", "f1"] and verdict(perfect, 1.0, reference=check) == []


def test_a_multi_label_pytorch_model_must_beat_the_commonest_set_and_every_label():
    from recipes_workbench.export.gate import Decider, GateRows, against_constant

    references = np.array([[1, 0], [1, 0], [1, 1], [0, 0]], dtype=float)
    rows = GateRows(
        encoded=None, references=references, document_ids=None, window_pooling="mean", source="rows"
    )
    decider = Decider("multi_label_classification", ["a", "b"], thresholds=[0.5, 0.5])
    check = against_constant(np.tile([3.0, -3.0], (4, 1)) + np.linspace(0, 1, 4)[:, None], rows, decider)
    assert check["best_constant"]["accuracy"] == [0.5, "the commonest label set"]
    assert check["best_constant"]["f1"][1] == "every label" and check["beats_constant_on"] == []
    right = np.where(references > 0, 3.0, -3.0)
    assert against_constant(right, rows, decider)["beats_constant_on"] == ["accuracy", "f1", "f1_micro"]
