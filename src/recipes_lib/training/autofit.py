"""`--auto_batch_size`: train with the largest per-device batch that fits, at the same effective batch.

The effective batch (per-device batch x gradient_accumulation_steps, per process) is what the
learning rate was tuned for, so it stays exactly what the user asked for: the per-device batch
becomes the largest divisor of it that fits, and gradient accumulation makes up the rest.
Asked for 32 x 1 where 12 fit: 8 x 4 (12 does not divide 32; 8 x 4 = 32 exactly).

1. The planner (memory/planner/) predicts the largest batch that fits this device's free memory.
2. Safety net: if training still runs out of memory, accelerate's `find_executable_batch_size`
   retries with the next smaller divisor. Training restarts from the step-0 weights only when the
   error came before the first optimizer step, which is where it comes: the length-grouped sampler
   puts the longest batch first. (Like the Trainer's own auto_find_batch_size, a later error
   restarts the schedule from the current weights.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.units import GIB

if TYPE_CHECKING:  # the planner loads only under --auto_batch_size (a recipe imports this module)
    from recipes_lib.memory.planner import Setup

logger = logging.getLogger("recipes_lib")


@dataclass
class BatchChoice:
    requested_batch_size: int
    requested_accumulation: int
    planner_largest_batch: int | None
    budget_gib: float | None
    batch_size: int
    accumulation: int
    out_of_memory_retries: list[int] = field(default_factory=list)  # batch sizes that ran out

    def after_training(self, training, out_of_memory_at: list[int]) -> BatchChoice:
        """The choice as training ended: the batch it trained with, after any out-of-memory retries."""
        return replace(
            self,
            batch_size=training.per_device_train_batch_size,
            accumulation=training.gradient_accumulation_steps,
            out_of_memory_retries=list(out_of_memory_at),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "requested_per_device_train_batch_size": self.requested_batch_size,
            "requested_gradient_accumulation_steps": self.requested_accumulation,
            "planner_largest_batch": self.planner_largest_batch,
            "budget_gib": None if self.budget_gib is None else round(self.budget_gib, 3),
            "per_device_train_batch_size": self.batch_size,
            "gradient_accumulation_steps": self.accumulation,
            "out_of_memory_at_batch_sizes": self.out_of_memory_retries,
        }


def divisors_descending(number: int) -> list[int]:
    return [candidate for candidate in range(number, 0, -1) if number % candidate == 0]


def batch_for(effective: int, largest_that_fits: int) -> int:
    """The largest divisor of the effective batch that is not above what fits (at least 1)."""
    return next((d for d in divisors_descending(effective) if d <= largest_that_fits), 1)


def device_budget_bytes(device: torch.device) -> int:
    """Memory this process can fill: free device memory plus what PyTorch already holds here.

    Read before the model loads (run/preparation.py): the planner counts the weights. CUDA: reading it
    creates the context, so it is not counted again. CPU: available RAM plus this process's
    resident memory.
    """
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device)
    import psutil

    return psutil.virtual_memory().available + psutil.Process().memory_info().rss


def planner_setup(arguments, shape: TrainingShape, device: torch.device) -> Setup:
    """The planner's view of this run: the recipe's training shape and the run's own arguments."""
    from recipes_lib.memory.planner import Setup

    training = arguments.training
    return Setup(
        shape=shape,
        batch_size=training.per_device_train_batch_size,
        seq_length=arguments.data.max_seq_length,
        bf16=bool(training.bf16),
        fp16=bool(training.fp16),  # the same bytes as bf16 (2 per autocast copy)
        # transformers 5 renamed gradient_checkpointing (a deprecated alias until v6).
        gradient_checkpointing=bool(training.activation_checkpointing),
        device="cuda" if device.type == "cuda" else "cpu",
        # The kernel check_model_support resolved (flash_attention_2 on a GPU with flash-attn).
        attention=arguments.model.attn_implementation
        if arguments.model.attn_implementation in ("eager", "flash_attention_2")
        else "sdpa",
        cuda_overhead_gib=0.0,  # already inside the budget: the context exists when the budget is read
    )


def choose_batch_size(
    arguments,
    shape: TrainingShape,
    model_config,
    budget_bytes: int | None = None,
    precision: str | None = None,
) -> BatchChoice:
    """The per-device batch and gradient accumulation the planner fits; `arguments` are left as they are.

    `shape` is what the recipe trains (its `RecipeSpec.shape(options)`); `precision` the run's
    decided one (None: as the arguments' bf16/fp16 say); `budget_bytes` defaults to what this device
    has free (`device_budget_bytes`), read before the model loads, which the planner counts. The
    run builds the Trainer's TrainingArguments with these two values (run/preparation.py).
    """
    from recipes_lib.memory.planner import largest_batch

    training = arguments.training
    device = training.device
    requested, accumulation = training.per_device_train_batch_size, training.gradient_accumulation_steps
    effective = requested * accumulation
    budget = device_budget_bytes(device) if budget_bytes is None else budget_bytes
    setup = planner_setup(arguments, shape, device)
    if precision is not None:
        setup = setup.with_precision(precision)
    try:
        largest = largest_batch(
            model_config, replace(setup, gradient_accumulation_steps=1), budget, limit=effective
        )
        if largest < effective:
            # A smaller batch means gradient accumulation, and then the gradients stay through the
            # next micro-batch's forward: plan for both together.
            with_accumulation = replace(setup, gradient_accumulation_steps=2)
            largest = largest_batch(model_config, with_accumulation, budget, limit=effective)
    except Exception as error:  # a model the planner does not know: the safety net alone decides
        logger.warning(
            "auto_batch_size: the planner cannot size this model (%s); starting at %d.", error, effective
        )
        largest = None
    batch = batch_for(effective, effective if largest is None else max(largest, 1))
    choice = BatchChoice(requested, accumulation, largest, budget / GIB, batch, effective // batch)
    logger.info(
        "auto_batch_size: %.1f GiB free; the planner fits batch %s; training with %d x %d gradient "
        "accumulation = %d per device per step, as asked.",
        budget / GIB,
        largest,
        choice.batch_size,
        choice.accumulation,
        effective,
    )
    return choice


def train_with_out_of_memory_backoff(trainer, train_once: Callable[[], Any]):
    """`train_once()` (the stock Trainer.train), retried with the next smaller divisor of the effective
    batch on out-of-memory. The batch sizes that ran out are appended to `trainer.out_of_memory_at`.

    The smaller batch goes into `trainer.args`, the copy the run resolved for this Trainer (as the
    Trainer's own auto_find_batch_size does), so results.json reports the batch that trained.
    """
    from accelerate.utils import find_executable_batch_size

    args = trainer.args
    effective = args.per_device_train_batch_size * args.gradient_accumulation_steps
    smaller = [d for d in divisors_descending(effective) if d < args.per_device_train_batch_size]

    def next_batch_size() -> int:
        trainer.out_of_memory_at.append(args.per_device_train_batch_size)
        if not smaller:
            return 0  # accelerate then stops with "No executable batch size found"
        batch_size = smaller.pop(0)
        logger.warning(
            "Out of memory at batch %d: retrying with %d x %d gradient accumulation.",
            trainer.out_of_memory_at[-1],
            batch_size,
            effective // batch_size,
        )
        return batch_size

    @find_executable_batch_size(
        starting_batch_size=args.per_device_train_batch_size, reduce_batch_size_fn=next_batch_size
    )
    def train(batch_size: int):
        args.per_device_train_batch_size = batch_size
        args.gradient_accumulation_steps = effective // batch_size
        # The Trainer copies the batch size at construction; its own auto_find_batch_size path
        # updates this attribute the same way (Trainer._update_auto_batch_size).
        trainer._train_batch_size = batch_size
        return train_once()

    return train()
