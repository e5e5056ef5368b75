"""Imbalanced classes (--class_weights) and stopping early with the best weights kept."""

from __future__ import annotations

import pytest

from recipes_lib.errors import RecipeError
from tests.helpers.runs import QUICK, run_args, run_in_process


def minority_recall(tiny_bert, data, output_dir, *extra):
    # 45 steps of 8 (1.5 epochs): enough to learn the common class, not yet the rare one unweighted.
    # The stock length grouping: the 45 steps were sized on its batch order; `wide` (full_ft's default since
    # issue #33) orders this tiny set's batches differently, and at 45 steps neither run had learnt the rare class.
    steps = [
        "--max_steps",
        "45",
        "--learning_rate",
        "5e-3",
        "--max_eval_samples",
        "80",
        "--length_grouping",
        "stock",
    ]
    args = run_args(tiny_bert, data, output_dir, *steps, *extra, **QUICK)
    results = run_in_process("full_ft", args)
    return results, results["per_class"]["cool"]["recall"]


def test_balanced_class_weights_weigh_the_rare_class_by_its_share(tiny_bert, skewed_data, tmp_path):
    """The weights a run computes and records, in a 2-step run (what they do to recall: the slow test below)."""
    args = run_args(tiny_bert, skewed_data, tmp_path / "run", "--class_weights", "balanced", **QUICK)
    weights = run_in_process("full_ft", args)["class_weights"]
    assert weights["cool"] > 3 * weights["warm"]  # 12% of train


def test_the_weighted_loss_weighs_each_example_by_its_class_and_divides_by_the_steps_examples():
    """The Trainer's compute_loss_func under --class_weights: each example's cross-entropy times its
    class's weight, summed, over the examples of the whole optimizer step (num_items_in_batch)."""
    import torch

    from recipes_lib.training.class_weights import WeightedCrossEntropy

    logits, labels = torch.tensor([[2.0, -1.0], [0.5, 0.3], [-1.0, 1.5]]), torch.tensor([0, 1, 1])
    loss = WeightedCrossEntropy([1.0, 3.0])({"logits": logits}, labels, num_items_in_batch=6)
    each = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    assert loss.item() == pytest.approx(float((each * torch.tensor([1.0, 3.0, 3.0])).sum() / 6))


# Slow: two 45-step runs (~40 s on 2 cores); the test above checks the weights by default.
@pytest.mark.slow
def test_balanced_class_weights_raise_the_minority_class_recall(seeded_bert, skewed_data, tmp_path):
    plain, plain_recall = minority_recall(seeded_bert, skewed_data, tmp_path / "plain")
    weighted, weighted_recall = minority_recall(
        seeded_bert, skewed_data, tmp_path / "weighted", "--class_weights", "balanced"
    )
    assert plain["class_weights"] is None
    assert weighted["class_weights"]["cool"] > 3 * weighted["class_weights"]["warm"]  # 12% of train
    assert weighted_recall > plain_recall


@pytest.mark.parametrize("option, expected", [("1,2,3", "3 positive numbers"), ("heavy", "not 'balanced'")])
def test_bad_class_weights_are_refused(option, expected, tiny_bert, skewed_data, tmp_path):
    with pytest.raises(
        RecipeError, match=expected if expected != "3 positive numbers" else "is not 'balanced' or 2"
    ):
        run_in_process(
            "full_ft", run_args(tiny_bert, skewed_data, tmp_path / "run", "--class_weights", option, **QUICK)
        )


def test_early_stopping_ends_with_the_best_evaluation_and_says_which_step(
    tiny_bert, learnable_data, tmp_path
):
    # A learning rate that overshoots after a few steps: the best evaluation is not the last one.
    args = run_args(
        tiny_bert, learnable_data, tmp_path / "run",
        "--max_steps", "40", "--learning_rate", "2e-2", "--eval_strategy", "steps", "--eval_steps", "4",
        "--save_strategy", "steps", "--save_steps", "4", "--early_stopping_patience", "2", "--warmup_steps", "0",
        **QUICK,
    )  # fmt: skip
    results = run_in_process("full_ft", args)
    assert results["best_step"] is not None and results["best_step"] % 4 == 0
    assert results["best_step"] <= results["train_steps"]
    # The weights evaluated at the end are the best checkpoint's: the same loss as at that step.
    assert results["eval_loss"] == pytest.approx(results["best_metric"], abs=1e-5)


def test_early_stopping_without_checkpoints_is_refused_before_anything_loads(
    tiny_bert, learnable_data, tmp_path
):
    with pytest.raises(RecipeError, match="early_stopping_patience 2 needs a checkpoint at every evaluation"):
        run_in_process(
            "full_ft",
            run_args(tiny_bert, learnable_data, tmp_path / "run", "--early_stopping_patience", "2", **QUICK),
        )


def test_multi_label_balanced_weights_are_each_labels_negatives_over_positives_capped():
    """--class_weights balanced on multi-label rows: negatives / positives per label, at most MAX_POSITIVE_WEIGHT."""
    import torch

    from recipes_lib.training.class_weights import MAX_POSITIVE_WEIGHT, class_weights_from

    rows = torch.zeros(100, 3)
    rows[:50, 0] = 1  # half the rows: 50 / 50
    rows[:20, 1] = 1  # a fifth: 80 / 20
    rows[:1, 2] = 1  # one row: 99 / 1, capped
    assert class_weights_from("balanced", rows.tolist(), ["a", "b", "c"]) == [1.0, 4.0, MAX_POSITIVE_WEIGHT]
    assert MAX_POSITIVE_WEIGHT < 99
    with pytest.raises(RecipeError, match=r"\['c'\] is on none of them.*--class_weights 1,1,1"):
        class_weights_from("balanced", rows[1:].tolist(), ["a", "b", "c"])


def test_the_weighted_binary_loss_weighs_each_labels_positive_rows_and_is_the_heads_loss_unweighted():
    import torch

    from recipes_lib.training.class_weights import WeightedBinaryCrossEntropy
    from recipes_lib.training.losses import evaluation_loss

    logits = torch.tensor([[2.0, -1.0, 0.3], [0.5, 0.3, -2.0]])
    labels = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    # Every weight 1: the mean BCE the multi-label head computes (the Trainer counts rows x labels).
    plain = WeightedBinaryCrossEntropy([1.0, 1.0, 1.0])({"logits": logits}, labels, num_items_in_batch=6)
    assert plain.item() == pytest.approx(
        torch.nn.functional.binary_cross_entropy_with_logits(logits, labels).item()
    )
    weighted = WeightedBinaryCrossEntropy([1.0, 4.0, 2.0])({"logits": logits}, labels, num_items_in_batch=6)
    each = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    positive_weight = torch.tensor([[1.0, 1.0, 1.0], [1.0, 4.0, 2.0]])  # only the positive cells
    assert weighted.item() == pytest.approx(float((each * positive_weight).sum() / 6))
    assert evaluation_loss(logits, labels, "multi_label_classification", [1.0, 4.0, 2.0]) == pytest.approx(
        float((each * positive_weight).mean())
    )


def test_a_multi_label_run_takes_balanced_class_weights_and_records_them(tiny_bert, tmp_path):
    from tests.helpers.data import multi_label_files

    files = multi_label_files(tmp_path / "data", 64, 16)
    args = run_args(tiny_bert, files, tmp_path / "run", "--class_weights", "balanced", **QUICK)
    results = run_in_process("full_ft", args)
    assert results["problem_type"] == "multi_label_classification"
    weights = results["class_weights"]
    assert set(weights) == {"cool", "warm"} and all(0 < w <= 10 for w in weights.values())
    assert results["config"]["class_weights"] == "balanced"
