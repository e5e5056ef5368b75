"""The options of recipes/distill.py, parsed like the shared arguments; loaded by that recipe (and the
workbench's list of recipes and planner), not by every run."""

from __future__ import annotations

from dataclasses import dataclass

from recipes_lib.config.recipe_spec import option
from recipes_lib.errors import ConfigError

# Hinton et al. (2015) soften both distributions with T = 2 to 4 on classification; 2 keeps most of
# the teacher's ranking of the wrong classes without flattening a confident teacher to noise.
DEFAULT_DISTILL_TEMPERATURE = 2.0


# Rows per batch of the teacher's pass (inference only, before the student loads): distillation
# runs it, and `recipes-lib plan --recipe distill` plans it at this batch.
TEACHER_BATCH_SIZE = 64


@dataclass
class DistillArguments:
    """The options of recipes/distill.py: the teacher, how much the student follows it, unlabelled rows."""

    teacher: str | None = option(
        None,
        "The teacher: the output_dir of a finished run of any recipe (a full model, a LoRA or QLoRA "
        "adapter, run on its base as it was evaluated). Its logits on every training row are computed once, "
        "before the student loads, and cached in output_dir/teacher_logits/.",
    )
    distill_temperature: float = option(
        DEFAULT_DISTILL_TEMPERATURE,
        "Temperature T of the teacher term: the student's and the teacher's logits are divided by T "
        "before the softmax (sigmoid for multi-label), and the term is multiplied by T^2 so its gradients keep "
        "their size. Regression ignores it (mean squared error to the teacher's output).",
    )
    distill_alpha: float = option(
        0.5,
        "Weight of the teacher term on a row with a gold label: loss = alpha x teacher term + "
        "(1 - alpha) x the task's loss on the gold label. A row without a gold label (an empty label cell, "
        "or a --transfer_file row) learns from the teacher alone, at weight 1. 1.0: the teacher only.",
    )
    transfer_file: str | None = option(
        None,
        "Unlabelled training rows (same format and text columns as --train_file; a label column, if "
        "any, is not read): the teacher labels them, and the student trains on them beside --train_file.",
    )

    def __post_init__(self):
        if not self.distill_temperature > 0:
            raise ConfigError(
                f"distill_temperature is {self.distill_temperature}; it must be positive (1 leaves the "
                f"logits as they are; {DEFAULT_DISTILL_TEMPERATURE} is the default)."
            )
        if not 0 <= self.distill_alpha <= 1:
            raise ConfigError(
                f"distill_alpha is {self.distill_alpha}; it is the teacher term's weight, in [0, 1] "
                "(0.5: half teacher, half gold label)."
            )
