"""The Trainer every recipe uses: the stock Trainer plus length grouping that resumes exactly,
evaluation in input order, and the safeguards that keep a run from being lost (stop on signals and
NaN, complete checkpoints, the --auto_batch_size out-of-memory back-off). It holds only what a callback
cannot do (docs/development.md, "Private Trainer methods"; recipes/README.md for a stock Trainer).
"""

from __future__ import annotations

import inspect
import signal
from contextlib import contextmanager
from pathlib import Path

import torch
import transformers
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from recipes_lib.config.arguments import DEFAULT_LENGTH_GROUPING, LENGTH_GROUPINGS
from recipes_lib.config.versions import TRANSFORMERS
from recipes_lib.errors import TrainingInterrupted
from recipes_lib.training.checkpoints import COMPLETE_MARKER, mark_complete
from recipes_lib.training.safeguards import (
    StopOnSignal,
    complete_or_removed,
    final_save_or_removed,
    first_non_finite_parameter,
)
from recipes_lib.whole_files import write_text_whole

# The private Trainer methods RecipeTrainer overrides for want of a public extension point (each override
# says why), with their parameters after self. A release that renamed one would skip the override and train
# differently (another order, no complete checkpoints): importing this module stops instead.
PRIVATE_TRAINER_HOOKS = {
    "_get_train_sampler": ("train_dataset",),
    "_save_checkpoint": ("model", "trial"),
    "_get_output_dir": ("trial",),
}


def check_private_hooks(trainer_class: type = Trainer) -> None:
    """One paragraph naming the release and the fix for the first hook `trainer_class` lacks or changed."""
    for name, parameters in PRIVATE_TRAINER_HOOKS.items():
        method = getattr(trainer_class, name, None)
        found = tuple(inspect.signature(method).parameters)[1:] if callable(method) else None
        if found != parameters:
            version = transformers.__version__
            changed = "has no such method" if found is None else f"defines {name}({', '.join(found)})"
            raise ImportError(
                f"recipes-lib overrides transformers' private {trainer_class.__name__}.{name}(self, "
                f"{', '.join(parameters)}), but transformers {version} {changed}. Install a release the recipes "
                f'are tested with: pip install "{TRANSFORMERS}". If {version} is inside that range, the range is '
                "wrong: please report it (tests/test_trainer_surface.py checks every private method the library "
                "overrides)."
            )


check_private_hooks()


class RecipeTrainer(Trainer):
    """transformers.Trainer with the same constructor, and what the module docstring lists."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Set in the Trainer's constructor, which nothing else reaches. Sequence-classification models
        # take **kwargs, so the Trainer takes their loss for a sum over all processes and multiplies it by
        # their number: under 2 processes loss and gradients twice too large. Their loss is a local mean.
        # (A recipe's model says so itself, `accepts_loss_kwargs = False`; this covers other models.)
        self.model_accepts_loss_kwargs = False
        self.stop_on_signal = StopOnSignal()
        self.add_callback(self.stop_on_signal)
        self.sampler_epoch = SamplerEpoch()  # its sampler is set by _get_train_sampler under group_by_length
        self.add_callback(self.sampler_epoch)

    # Why an override: callbacks see the loss only at logging steps, after the optimizer step took it.
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        # The Trainer already reads the loss on the host every micro-batch (its logging NaN filter,
        # on by default), so this check adds no GPU sync. It runs after backward and before the optimizer step: the
        # weights have not taken this batch's NaN gradients yet.
        if not bool(torch.isfinite(loss)):
            from recipes_lib.training.failures import diverged

            raise diverged(
                f"The training loss became {float(loss)} at step {self.state.global_step + 1} "
                f"(epoch {self.state.epoch or 0:.2f}); the run stopped there and saved no final model.",
                self.args,
            )
        return loss

    # Why an override: the Trainer's loop takes a step before it asks whether to stop. Resumed from a
    # checkpoint at max_steps in mid-epoch (a run killed after its last checkpoint, before results.json),
    # it trained one step past the end; here it takes no batch and stops, so the record is the run's.
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        if self.state.max_steps > 0 and self.state.global_step >= self.state.max_steps:
            self.control.should_training_stop = True
            return [], None
        return super().get_batch_samples(epoch_iterator, num_batches, device)

    # Why an override: the signal handlers and the out-of-memory retry wrap the whole of train().
    def train(self, *args, **kwargs):
        """Trainer.train, stopping cleanly on SIGINT/SIGTERM (checkpoint saved, TrainingInterrupted raised);
        under --auto_batch_size, backing off on out-of-memory (autofit.py)."""
        with self.stop_on_signal.installed():
            if getattr(self.args, "auto_batch_size", False):
                from recipes_lib.training.autofit import train_with_out_of_memory_backoff

                output = train_with_out_of_memory_backoff(
                    self, lambda: super(RecipeTrainer, self).train(*args, **kwargs)
                )
            else:
                output = super().train(*args, **kwargs)
            # A signal that came after the last step (during the final evaluation, say) has not been
            # acted on yet; every process takes part in this last agreement, as in each step.
            signal_number = self.stop_on_signal.agree(self.args)
            if signal_number is not None and self.stop_on_signal.checkpoint_step != self.state.global_step:
                self._save_checkpoint(self.model, trial=None)
        if signal_number is None:
            return output
        checkpoint = Path(self.args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        raise TrainingInterrupted(
            f"{signal.Signals(signal_number).name} stopped training at step {self.state.global_step} of "
            f"{self.state.max_steps} (epoch {self.state.epoch or 0:.2f}). Checkpoint saved: {checkpoint}. "
            "No final model and no results.json were written. To continue, run the same command with "
            "--resume_from_checkpoint last.",
            signal_number,
        )

    # Why an override: on_save runs after the weights are written; this refuses before.
    def save_model(self, output_dir=None, _internal_call=False):
        """Save the model (final, or inside a checkpoint), unless its weights hold NaN or inf."""
        broken = first_non_finite_parameter(self.model)
        if broken is not None:
            from recipes_lib.training.failures import diverged

            raise diverged(
                f"The weights became non-finite (NaN or inf, first in '{broken}') by step "
                f"{self.state.global_step}; they were not saved.",
                self.args,
            )
        if _internal_call:  # inside a checkpoint (complete_or_removed) or a push
            return super().save_model(output_dir, _internal_call)
        # The final model: a write the disk refuses leaves nothing partial, and one paragraph.
        with final_save_or_removed(Path(output_dir or self.args.output_dir)):
            super().save_model(output_dir, _internal_call)

    # The text of the run's own model card (tracking/model_card.py), set once the run's results exist;
    # until then the Trainer's draft.
    model_card = None

    # Why an override: push_to_hub writes its draft card between saving and uploading, with no callback between.
    def create_model_card(self, *args, **kwargs):
        """README.md in output_dir: the run's card where it has set `model_card`, else the Trainer's draft
        (`push_to_hub` calls this after saving the model, whose peft save rewrote README.md, before uploading)."""
        if self.model_card is None:
            return super().create_model_card(*args, **kwargs)
        if self.is_world_process_zero():
            write_text_whole(Path(self.args.output_dir) / "README.md", self.model_card, newline="")
        return None

    # Why an override: the Trainer deletes old checkpoints inside this method, before on_save runs.
    def _save_checkpoint(self, model, trial):
        """Trainer's checkpoint, then a completion marker, then the deletion of old checkpoints: a kill
        between the two can never leave a directory without any complete checkpoint."""
        run_dir = Path(self._get_output_dir(trial=trial))
        checkpoint_dir = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.args.should_save:
            # Saving again into an existing checkpoint-N (a resumed run reaching the step where the
            # last one was cut short): it is not complete until the new marker says so.
            (checkpoint_dir / COMPLETE_MARKER).unlink(missing_ok=True)
        save_total_limit = self.args.save_total_limit
        self.args.save_total_limit = None  # rotate_checkpoints does nothing with None
        # A write the disk refuses: the partial checkpoint goes, the last complete one stays, one paragraph.
        with complete_or_removed(checkpoint_dir, run_dir):
            try:
                super()._save_checkpoint(model, trial)
            finally:
                self.args.save_total_limit = save_total_limit
            # Every process has written its own files (each saves its RNG state) before the marker.
            self.accelerator.wait_for_everyone()
            if self.args.should_save:
                mark_complete(checkpoint_dir, self.state.global_step)
        if self.args.should_save:
            rotate_checkpoints(
                output_dir=str(run_dir),
                save_total_limit=save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                # Oldest by step number, as resuming reads them (checkpoints.checkpoints_in). By mtime, as
                # the Trainer's own call does, checkpoints written within a second of each other (a small
                # model's) made transformers warn that "mtime may not be reliable on this filesystem".
                use_mtime=False,
            )

    # Why an override: the sampler is built in private code a callback cannot reach.
    def _get_train_sampler(self, train_dataset=None):
        # The Trainer drops unused columns before building the sampler, which throws away the
        # precomputed `length` column; the length-grouped sampler would then re-read every example
        # to measure it. The rows are the same, so hand it the dataset that still has the column.
        if self.args.train_sampling_strategy == "group_by_length" and self.train_dataset is not None:
            train_dataset = self.train_dataset
        sampler = super()._get_train_sampler(train_dataset)
        if isinstance(sampler, LengthGroupedSampler):
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            # One optimizer step's batches on every process: grouped and shuffled as a unit, so the
            # processes keep getting batches of similar length and none waits long for the others.
            # (`_train_batch_size`: what the Trainer trains with, after any automatic back-off.)
            step_size = self._train_batch_size * self.args.gradient_accumulation_steps * self.args.world_size
            # The recipes' --length_grouping (a plain TrainingArguments has none: the library default).
            grouping = getattr(self.args, "length_grouping", None) or DEFAULT_LENGTH_GROUPING
            self.sampler_epoch.sampler = ShuffledLengthGroupedSampler(
                sampler.lengths, step_size, seed, grouping=grouping
            )
            return self.sampler_epoch.sampler
        return sampler

    # Why an override: the evaluation sampler is built in private code a callback cannot reach.
    def get_eval_dataloader(self, eval_dataset=None):
        with evaluation_in_input_order(self.args):
            return super().get_eval_dataloader(eval_dataset)

    # Why an override: as get_eval_dataloader, for predict().
    def get_test_dataloader(self, test_dataset):
        with evaluation_in_input_order(self.args):
            return super().get_test_dataloader(test_dataset)


@contextmanager
def evaluation_in_input_order(args: TrainingArguments):
    """The Trainer's evaluation sampler as it is without length grouping: input order (grouped, the
    predictions would not follow the input rows). The strategy is lifted only while the evaluation
    DataLoader is built (RecipeTrainer's getters, or another Trainer's in run/record.py), standing in
    for an override of the private `_get_eval_sampler`. `args` are the Trainer's own, never the parsed ones.
    """
    strategy = args.train_sampling_strategy
    if strategy == "group_by_length":
        args.train_sampling_strategy = "random"
    try:
        yield
    finally:
        args.train_sampling_strategy = strategy


WIDE_MEGA_BATCH_STEPS = 50  # the stock sampler's cap: 50 x 32 = 1,600 examples sorted together


class ShuffledLengthGroupedSampler(torch.utils.data.Sampler):
    """Length-grouped batches in a random order drawn from (seed, epoch) alone, so a resumed run replays
    it: docs/speed.md ("Batching") gives the groups, the order and why. The unit grouped and moved is
    `step_size` examples, one optimizer step's worth on every process.
    """

    def __init__(
        self, lengths: list[int], step_size: int, seed: int, grouping: str = DEFAULT_LENGTH_GROUPING
    ):
        if grouping not in LENGTH_GROUPINGS:
            raise ValueError(
                f"length_grouping is '{grouping}'; use one of {', '.join(LENGTH_GROUPINGS)} "
                "('wide': little padding at every dataset size; 'stock': transformers' own mega-batches)."
            )
        # A plain list: a datasets column read one element at a time is slow to sort.
        self.lengths = list(lengths)
        self.step_size, self.seed, self.epoch = step_size, seed, 0
        self.grouping = grouping
        steps = -(-len(self.lengths) // step_size)  # ceil: an incomplete last step counts
        # None: transformers' own size, min(len // (step_size * 4), 50) steps.
        self.mega_batch_steps = max(1, min(steps, WIDE_MEGA_BATCH_STEPS)) if grouping == "wide" else None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        # transformers' own grouping function; at its own mega-batch size under "stock" (None).
        indices = get_length_grouped_indices(
            self.lengths, self.step_size, mega_batch_mult=self.mega_batch_steps, generator=generator
        )
        size = self.step_size
        groups = [indices[start : start + size] for start in range(0, len(indices), size)]
        first, middle = groups[:1], groups[1:]
        last = [middle.pop()] if middle and len(middle[-1]) < size else []
        order = torch.randperm(len(middle), generator=generator).tolist()
        for group in first + [middle[i] for i in order] + last:
            yield from group


class SamplerEpoch(TrainerCallback):
    """Hands the training sampler each epoch's number as the epoch begins (the Trainer's count: the first
    from the state it starts or resumes with, then one more at every begin). accelerate's `set_epoch`
    does not reach it through the SkipBatchSampler(BatchSamplerShard(...)) of a multi-process run resumed
    mid-epoch; without the epoch, the order would replay epoch 0's.
    """

    def __init__(self):
        # The training sampler under group_by_length (None before training, or with another strategy).
        self.sampler: ShuffledLengthGroupedSampler | None = None
        self.epoch: int | None = None  # the epoch running now; None before the first of a train() call

    def on_train_begin(self, args, state, control, **kwargs):
        self.epoch = None

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.epoch = int(state.epoch or 0) if self.epoch is None else self.epoch + 1
        if self.sampler is not None:
            self.sampler.set_epoch(self.epoch)
