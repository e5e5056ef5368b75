"""Every recipe under 2 processes (DDP over gloo on the CPU, accelerate_configs/multi_cpu.yaml).

What must hold when only the accelerate config changes:
- each validation example is evaluated exactly once: `eval_samples` (counted from the predictions
  gathered over both processes) is the split size, and the metrics equal a 1-process evaluation of
  the saved checkpoint;
- results.json is written once, by the main process;
- 2 processes x batch 8 train like 1 process x batch 16.

The validation split has 63 examples, an odd number: two processes cannot split it evenly, so
accelerate pads the second process's last batch with a repeat of an example from the start and must drop
that repeat when it gathers the predictions. 15 of the 63 have no colour word (their label is a
coin flip), so accuracy stays below 1 and a repeated or dropped example changes it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.helpers.data import NOISE, learnable_rows, multi_label_files, read_jsonl, write_csv
from tests.helpers.models import build_tiny_bert
from tests.helpers.repo import RECIPES, load_recipe
from tests.helpers.runs import run_args, run_recording_results_writes

VALIDATION_LEARNABLE, VALIDATION_COLOURLESS = 48, 15
VALIDATION_SIZE = VALIDATION_LEARNABLE + VALIDATION_COLOURLESS  # 63
# full_ft runs by default (10 to 25 s on the 2-core test machine, with its load); the others are
# marked slow (LoRA under two processes also runs by default, multi-label, in the last test here).
DEFAULT_RECIPES = ("full_ft",)
# 256 training examples / (8 per process x 2 processes) = 16 steps per epoch, 160 steps in all.
PER_DEVICE_BATCH, EPOCHS = 8, 10
# The run of every test here: training to learn the task, evaluated once at the end, nothing saved but the model.
DDP_RUN = {"batch_size": PER_DEVICE_BATCH, "epochs": EPOCHS, "eval_strategy": "no"}


def recipe_param(name: str):
    return pytest.param(name, marks=() if name in DEFAULT_RECIPES else pytest.mark.slow)


@pytest.fixture(scope="module")
def bert64(tmp_path_factory) -> Path:
    # Hidden 64: the 64 x 64 attention matrices hold 4,096 elements, bitsandbytes' min_8bit_size,
    # so adamw_8bit really keeps 8-bit state here (a hidden-32 model would stay in 32-bit).
    return build_tiny_bert(tmp_path_factory.mktemp("bert64"), hidden_size=64, intermediate_size=128)


@pytest.fixture(scope="module")
def odd_data(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("odd-data")
    rng = random.Random(6)
    colourless = [
        (" ".join(rng.sample(NOISE, rng.randint(3, 8))), ("warm", "cool")[i % 2])
        for i in range(VALIDATION_COLOURLESS)
    ]
    validation = learnable_rows(VALIDATION_LEARNABLE, seed=5) + colourless
    rng.shuffle(validation)  # colourless rows on both processes' shards
    return {
        "train": write_csv(directory / "train.csv", learnable_rows(256, seed=1)),
        "validation": write_csv(directory / "validation.csv", validation),
    }


def launch_two_processes(recipe: str, args: list[str], ledger: Path):
    # Port 0: accelerate picks a free port, so runs started at the same time never collide.
    return run_recording_results_writes(
        recipe, args, ledger, "multi_cpu.yaml", "--num_processes", "2", "--main_process_port", "0"
    )


_two_process_runs: dict[str, dict] = {}


def two_process_run(recipe: str, model: Path, data: dict[str, Path], tmp_path_factory) -> dict:
    """One 2-process run per recipe, shared by the tests that look at it."""
    if recipe not in _two_process_runs:
        root = tmp_path_factory.mktemp(f"ddp-{recipe}")
        output_dir, ledger = root / "out", root / "writes.txt"
        completed = launch_two_processes(recipe, run_args(model, data, output_dir, **DDP_RUN), ledger)
        _two_process_runs[recipe] = {
            "output_dir": output_dir,
            "ledger": ledger,
            "stdout": completed.stdout,
            "results": json.loads((output_dir / "results.json").read_text()),
        }
    return _two_process_runs[recipe]


def evaluate_in_one_process(recipe_name: str, model: Path, data, checkpoint: Path, scratch: Path) -> dict:
    """The recipe's own evaluation (same arguments, data, model class, collator, metrics), in this one process,
    of the weights the 2-process run saved in `checkpoint`."""
    from safetensors.torch import load_file
    from transformers import DataCollatorWithPadding

    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.tasks import SINGLE_LABEL
    from recipes_lib.data.loading import load_classification_data
    from recipes_lib.data.tokenize import tokenize
    from recipes_lib.evaluation.metrics import TaskMetrics
    from recipes_lib.modeling.adapters import (
        LoraArguments,
        add_lora,
        nf4_quantization_config,
        prepare_4bit_model,
    )
    from recipes_lib.modeling.loading import load_model, load_model_config, load_tokenizer
    from recipes_lib.training.trainer import RecipeTrainer

    arguments = parse_arguments(load_recipe(recipe_name).SPEC, run_args(model, data, scratch, **DDP_RUN))
    tokenizer = load_tokenizer(arguments.model)
    classification = load_classification_data(arguments.data, seed=arguments.training.seed)
    tokenized = tokenize(classification, tokenizer, arguments.data, arguments.training.main_process_first)
    # The model as the recipe script builds it.
    model_config = load_model_config(arguments.model, classification.labels)
    if recipe_name == "qlora":
        lora = arguments.options(LoraArguments)
        quantization = nf4_quantization_config(model_config, arguments.training.precision)
        base = load_model(
            arguments.model, model_config, quantization_config=quantization, device_map={"": "cpu"}
        )
        trained = add_lora(prepare_4bit_model(base), lora)
    elif recipe_name == "lora":
        trained = add_lora(load_model(arguments.model, model_config), arguments.options(LoraArguments))
    else:
        trained = load_model(arguments.model, model_config)
    if (checkpoint / "adapter_model.safetensors").is_file():  # lora, qlora: the adapter and the head
        from peft import set_peft_model_state_dict

        loaded = set_peft_model_state_dict(trained, load_file(checkpoint / "adapter_model.safetensors"))
        assert not loaded.unexpected_keys, loaded.unexpected_keys
    else:
        trained.load_state_dict(load_file(checkpoint / "model.safetensors"))
    trainer = RecipeTrainer(
        model=trained,
        args=arguments.training,
        eval_dataset=tokenized["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=TaskMetrics(SINGLE_LABEL, classification.labels.num_labels),
    )
    return trainer.evaluate()


@pytest.mark.parametrize("recipe", [recipe_param(name) for name in RECIPES])
def test_recipe_trains_with_two_processes_and_writes_results_once_from_the_main_process(
    recipe, bert64, odd_data, tmp_path_factory
):
    run = two_process_run(recipe, bert64, odd_data, tmp_path_factory)
    results, output_dir = run["results"], run["output_dir"]
    assert results["num_processes"] == 2 and results["recipe"] == recipe
    # Exactly one write, by rank 0; the "Done" line once; no temporary file left behind.
    assert run["ledger"].read_text().splitlines() == ["rank 0"]
    assert run["stdout"].count("Done: accuracy") == 1
    assert sorted(path.name for path in output_dir.glob("*results*")) == ["results.json"]
    # It learned: all 48 examples with a colour word are learnable, the 15 others are coin flips,
    # so a model that learned scores about (48 + 7.5) / 63 = 0.88; chance is 0.5.
    assert results["eval_accuracy"] >= 0.75, results
    # What makes the recipe that recipe survived DDP.
    if recipe == "adamw_8bit":
        assert results["optimizer_state_bytes_by_dtype"].get("uint8", 0) > 0, results
    if recipe in ("lora", "qlora"):
        assert (output_dir / "adapter_model.safetensors").is_file()
        assert results["params_trainable"] < results["params_total"] / 2


@pytest.mark.parametrize("recipe", [recipe_param(name) for name in RECIPES])
def test_two_process_evaluation_counts_each_example_once_and_matches_one_process(
    recipe, bert64, odd_data, tmp_path_factory, tmp_path
):
    run = two_process_run(recipe, bert64, odd_data, tmp_path_factory)
    results = run["results"]
    assert results["eval_samples"] == VALIDATION_SIZE  # 63, not 64: the padding repeat was dropped

    one_process = evaluate_in_one_process(recipe, bert64, odd_data, run["output_dir"], tmp_path / "eval")
    assert one_process["eval_samples"] == VALIDATION_SIZE
    # Accuracy and F1 count predictions: any example seen twice or missed would change them.
    assert results["eval_accuracy"] == pytest.approx(one_process["eval_accuracy"], abs=1e-12)
    assert results["eval_f1"] == pytest.approx(one_process["eval_f1"], abs=1e-12)
    # The loss too (the Trainer's own per-batch average counted the padding repeat: 1.6% off here,
    # until the run's compute_metrics recomputed it from the gathered predictions: run/metrics.py).
    assert results["eval_loss"] == pytest.approx(one_process["eval_loss"], rel=1e-5)


def test_two_processes_train_like_one_process_with_the_same_total_batch(
    bert64, odd_data, tmp_path_factory, tmp_path
):
    """2 processes x 8 examples and 1 process x 16: the same 16 examples per step, the same result.

    accelerate gives each process alternate batches of one shuffled order, so both runs see the same
    16 examples per optimizer step and DDP averages the two halves' gradients: the same arithmetic up
    to float rounding. Tolerances: one validation example (1/63) in accuracy, 1% in training loss.
    A loss scaled by the number of processes (what the Trainer did to sequence classifiers until
    RecipeTrainer set `model_accepts_loss_kwargs = False`) shows as a training loss 2x the 1-process one.
    """
    two = two_process_run("full_ft", bert64, odd_data, tmp_path_factory)["results"]
    output_dir = tmp_path / "one-process"
    run_recording_results_writes(
        "full_ft",
        run_args(
            bert64, odd_data, output_dir, batch_size=2 * PER_DEVICE_BATCH, epochs=EPOCHS, eval_strategy="no"
        ),
        tmp_path / "writes.txt",
        "cpu.yaml",
    )
    one = json.loads((output_dir / "results.json").read_text())
    assert one["num_processes"] == 1 and two["num_processes"] == 2
    assert one["train_steps"] == two["train_steps"] == 160
    assert two["eval_accuracy"] == pytest.approx(one["eval_accuracy"], abs=1 / VALIDATION_SIZE)
    assert two["train_loss"] == pytest.approx(one["train_loss"], rel=0.01)


def test_compute_metrics_reports_how_many_predictions_it_scored():
    import numpy as np
    from transformers import EvalPrediction

    from recipes_lib.config.tasks import SINGLE_LABEL
    from recipes_lib.evaluation.metrics import TaskMetrics

    logits = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
    metrics = TaskMetrics(SINGLE_LABEL, 2)(EvalPrediction(predictions=logits, label_ids=np.array([0, 1, 1])))
    assert metrics["samples"] == 3 and metrics["accuracy"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_the_runs_eval_loss_is_the_stock_trainers_in_one_process(
    tiny_bert, tmp_path, label_smoothing, one_thread
):
    """Recomputing the loss from the gathered predictions (the run's compute_metrics) changes nothing
    where nothing was repeated, under the stock Trainer and RecipeTrainer alike."""
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    from recipes_lib.config.tasks import SINGLE_LABEL
    from recipes_lib.evaluation.metrics import TaskMetrics
    from recipes_lib.run.metrics import RunMetrics
    from recipes_lib.training.trainer import RecipeTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    rows = learnable_rows(23, seed=9)
    dataset = Dataset.from_dict(
        {
            **tokenizer([text for text, _ in rows], truncation=True, max_length=32),
            "labels": [int(label == "warm") for _, label in rows],
        }
    )
    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_eval_batch_size=5,  # batches of 5, 5, 5, 5, 3: the batch means weigh unequally
        label_smoothing_factor=label_smoothing,
        use_cpu=True,
        report_to="none",
    )
    losses = {}
    for trainer_class, metrics in (
        (Trainer, TaskMetrics(SINGLE_LABEL, 2)),  # the Trainer's own loss: a mean of batch means
        (Trainer, RunMetrics(SINGLE_LABEL, 2, label_smoothing=label_smoothing)),
        (RecipeTrainer, RunMetrics(SINGLE_LABEL, 2, label_smoothing=label_smoothing)),
    ):
        trainer = trainer_class(
            model=AutoModelForSequenceClassification.from_pretrained(tiny_bert),
            args=arguments,
            eval_dataset=dataset,
            data_collator=DataCollatorWithPadding(tokenizer),
            compute_metrics=metrics,
        )
        losses[(trainer_class.__name__, type(metrics).__name__)] = trainer.evaluate()["eval_loss"]
    stock = losses[("Trainer", "TaskMetrics")]
    assert losses[("Trainer", "RunMetrics")] == pytest.approx(stock, rel=1e-6)
    assert losses[("RecipeTrainer", "RunMetrics")] == pytest.approx(stock, rel=1e-6)


def test_training_loss_is_a_mean_whatever_the_gradient_accumulation(tiny_bert, tmp_path, one_thread):
    """Batch 8 in one step, or 4 + 4 accumulated: the same loss. The stock Trainer reported 2x for the
    second (it treats a sequence classifier's mean loss as a sum over the batch), as it does for 2 processes."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

    from recipes_lib.config.arguments import RecipeTrainingArguments
    from recipes_lib.training.trainer import RecipeTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    rows = learnable_rows(32, seed=3)
    dataset = Dataset.from_dict(
        {**tokenizer([text for text, _ in rows]), "labels": [int(label == "warm") for _, label in rows]}
    )
    losses = []
    for batch, accumulation in ((8, 1), (4, 2)):
        torch.manual_seed(0)
        arguments = RecipeTrainingArguments(
            output_dir=str(tmp_path / f"{batch}x{accumulation}"),
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            max_steps=4,
            learning_rate=1e-3,
            train_sampling_strategy="sequential",
            use_cpu=True,
            save_strategy="no",
            eval_strategy="no",
            report_to="none",
            disable_tqdm=True,
        )
        trainer = RecipeTrainer(
            model=AutoModelForSequenceClassification.from_pretrained(tiny_bert),
            args=arguments,
            train_dataset=dataset,
            data_collator=DataCollatorWithPadding(tokenizer),
        )
        losses.append(trainer.train().training_loss)
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)  # measured: equal to 5 digits; 2x before


def test_a_multi_label_lora_run_under_two_processes_tunes_saves_and_predicts_like_one(tmp_path):
    """Thresholds tuned from the gathered predictions, the merged model scored on the main process
    after the last collective step, each of the 63 validation rows once, predict equal to the run."""
    from recipes_workbench.tools.predict import predict

    model = build_tiny_bert(tmp_path / "bert")
    data = multi_label_files(tmp_path / "data", 128, VALIDATION_SIZE)
    output_dir, ledger = tmp_path / "out", tmp_path / "writes.txt"
    args = run_args(model, data, output_dir, "--max_steps", "6", "--merge_adapter", "true", **DDP_RUN)
    completed = launch_two_processes("lora", args, ledger)
    assert ledger.read_text().splitlines() == ["rank 0"]
    assert completed.stdout.count("Merged model in") == 1
    results = json.loads((output_dir / "results.json").read_text())
    assert results["problem_type"] == "multi_label_classification" and results["num_processes"] == 2
    assert results["eval_samples"] == VALIDATION_SIZE
    saved = json.loads((output_dir / "label_thresholds.json").read_text())["thresholds"]
    assert (
        saved
        == results["label_thresholds"]
        == json.loads((output_dir / "merged" / "label_thresholds.json").read_text())["thresholds"]
    )
    assert results["merged_eval_f1_micro"] == pytest.approx(results["eval_f1_micro"], abs=1e-4)
    evaluated = read_jsonl(output_dir / "eval_predictions.jsonl")
    predicted = predict(output_dir, data["validation"], progress=False)
    assert [row["prediction"] for row in predicted] == [row["prediction"] for row in evaluated]
