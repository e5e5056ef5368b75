"""`--auto_batch_size`: train with the largest per-device batch that fits, at the same effective batch
(docs/memory.md, "Let it pick the batch"). Training restarts from the step-0 weights only when the error
came before the first optimizer step, which is where it comes: the length-grouped sampler puts the
longest batch first. (Like the Trainer's own auto_find_batch_size, a later error restarts the schedule
from the current weights.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

logger = logging.getLogger("recipes_lib")


@dataclass(frozen=True)
class BatchChoice:
    requested_batch_size: int
    requested_accumulation: int
    batch_size: int
    accumulation: int
    out_of_memory_retries: list[int] = field(default_factory=list)  # batch sizes that ran out

    def after_training(self, training) -> BatchChoice:
        """The choice as training ended, from the Trainer's arguments: the batch it trained with, and the
        larger divisors, each of which ran out of memory (the back-off tries them in turn)."""
        batch_size = training.per_device_train_batch_size
        return replace(
            self,
            batch_size=batch_size,
            accumulation=training.gradient_accumulation_steps,
            out_of_memory_retries=[d for d in divisors_descending(self.batch_size) if d > batch_size],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "requested_per_device_train_batch_size": self.requested_batch_size,
            "requested_gradient_accumulation_steps": self.requested_accumulation,
            "per_device_train_batch_size": self.batch_size,
            "gradient_accumulation_steps": self.accumulation,
            "out_of_memory_at_batch_sizes": self.out_of_memory_retries,
        }


def divisors_descending(number: int) -> list[int]:
    return [candidate for candidate in range(number, 0, -1) if number % candidate == 0]


def choose_batch_size(training) -> BatchChoice:
    """The first batch to try: the whole effective batch per device, no accumulation; the training
    arguments are left as they are (the run builds the Trainer's own with these two values)."""
    requested, accumulation = training.per_device_train_batch_size, training.gradient_accumulation_steps
    effective = requested * accumulation
    logger.info(
        "auto_batch_size: starting at %d x 1 = %d per device per step, as asked; on out-of-memory the next "
        "smaller divisor, with gradient accumulation making up the rest.",
        effective,
        effective,
    )
    return BatchChoice(requested, accumulation, effective, 1)


def train_with_out_of_memory_backoff(trainer, train_once: Callable[[], Any]):
    """`train_once()` (the stock Trainer.train), retried with the next smaller divisor of the effective
    batch on out-of-memory; the smaller batch goes into `trainer.args`, the Trainer's own copy (as its
    auto_find_batch_size does), so results.json reports the batch that trained."""
    from accelerate.utils import find_executable_batch_size

    args = trainer.args
    effective = args.per_device_train_batch_size * args.gradient_accumulation_steps
    smaller = [d for d in divisors_descending(effective) if d < args.per_device_train_batch_size]

    def next_batch_size() -> int:
        if not smaller:
            return 0  # accelerate then stops with "No executable batch size found"
        batch_size = smaller.pop(0)
        logger.warning(
            "Out of memory at batch %d: retrying with %d x %d gradient accumulation.",
            args.per_device_train_batch_size,
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
