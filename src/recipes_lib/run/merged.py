"""--merge_adapter's scoring: the merged model's own figures, loaded by runs with that option only."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from recipes_lib.config.recipe_options import MERGED_SUBDIR
from recipes_lib.config.tasks import DEFAULT_THRESHOLD
from recipes_lib.data.tokenize import LABEL_COLUMN, padding_collator
from recipes_lib.evaluation import inference
from recipes_lib.tracking.names import METRIC_TITLES

logger = logging.getLogger("recipes_lib")


def evaluate_merged_model(trainer, merged, data, data_args) -> dict[str, Any]:
    """The merged model's own scores on the validation split, and what it is.

    The merged model is what a user deploys without peft; for QLoRA it is not the evaluated
    model (adapters.describe_merged_model), so its own figures are measured rather than assumed.
    Scored as it is in memory, on the main process (which merged it), under the autocast the
    Trainer evaluated in, against the split's labels in input order. Multi-label classes at 0.5.
    """
    training, scorer = trainer.args, trainer.compute_metrics
    model = merged.model.to(training.device).eval()
    collator = padding_collator(trainer.processing_class, data_args, training.device)
    validation = data.tokenized["validation"]
    with trainer.accelerator.autocast():
        progress = not training.disable_tqdm
        logits = inference.batch_logits(
            model, validation, collator, training.device, training.per_device_eval_batch_size, progress
        )
    references = np.asarray(validation[LABEL_COLUMN])
    logits, references = scorer.per_document(logits, references)  # sliding_window: one row per document
    scores = scorer.scores(logits, references, thresholds=[DEFAULT_THRESHOLD] * scorer.num_labels)
    logger.info(
        "Merged model in %s, %s: %s",
        Path(training.output_dir) / MERGED_SUBDIR,
        merged.description.split(". ")[0],
        ", ".join(f"{METRIC_TITLES[name]} {value:.4f}" for name, value in scores.items()),
    )
    return {
        "merged_model": merged.description,
        **{f"merged_eval_{name}": value for name, value in scores.items()},
    }
