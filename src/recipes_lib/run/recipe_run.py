"""`RecipeRun`: one run's bookkeeping at the steps the script names (output_dir lock, resume, seed, W&B,
memory phases, callbacks, the record); leaving through an exception writes no results.json, closes the W&B
run as failed and stops any tensor tracking. `run_main`: the script's entry point."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import datasets
import transformers
from accelerate.utils import get_int_from_env
from transformers import EarlyStoppingCallback, set_seed
from transformers.trainer_utils import PredictionOutput

from recipes_lib.config.arguments import ParsedArguments
from recipes_lib.config.parsing import wants_traceback
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.config.validation import claim_output_dir, resume_requested
from recipes_lib.credentials import redact
from recipes_lib.errors import RecipeError
from recipes_lib.memory.monitor import MemoryCallback, MemoryMonitor
from recipes_lib.memory.peaks import peak_memory
from recipes_lib.modeling.loading import count_parameters
from recipes_lib.results import RESULTS_FILE, RunResults, describe_device
from recipes_lib.run.preparation import Prepared
from recipes_lib.training.callbacks import (
    CollapseWarning,
    LastEpochEvaluation,
    PrecisionProbe,
    TokenCounter,
    final_metrics,
)
from recipes_lib.training.checkpoints import clear_previous_run
from recipes_lib.training.run_totals import LogAtCheckpoints

logger = logging.getLogger("recipes_lib")
LAUNCH_RANK_VARIABLES = ["RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK"]


class RunProbes(NamedTuple):
    memory: MemoryMonitor  # the memory phases, fed by the MemoryCallback
    tokens: TokenCounter
    precision: PrecisionProbe
    last_epoch: LastEpochEvaluation


def setup_logging(arguments: ParsedArguments, main_process: bool) -> None:
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", stream=sys.stdout
    )
    # Only the main process talks at INFO; the others would print every line N times.
    logger.setLevel(logging.INFO if main_process else logging.WARNING)
    log_level = arguments.training.get_process_log_level()
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)


class RecipeRun:
    """One run of a recipe: its bookkeeping at the steps the script names; `args` are never changed."""

    def __init__(self, arguments: ParsedArguments, spec: RecipeSpec):
        self.arguments = arguments  # as parsed
        self.spec = spec
        self.resume_from: str | None = None  # --resume_from_checkpoint's checkpoint (resolved on entering)
        self.tracker = None  # the W&B run's Tracker (start_tracking), when W&B reports
        self.probes: RunProbes | None = None  # what its own callbacks measure: never read from a Trainer

    @property
    def is_main_process(self) -> bool:
        # The launch's global rank, as accelerate reads it (torchrun's RANK, MPI's): the parsed arguments'
        # process_index says 0 in every process until the Trainer's copy sets up the distributed state.
        return get_int_from_env(LAUNCH_RANK_VARIABLES, 0) == 0

    def __enter__(self) -> RecipeRun:
        training = self.arguments.training
        setup_logging(self.arguments, self.is_main_process)
        if training.push_to_hub:  # no token or offline: stop before any download
            from recipes_lib.tracking.hub import check_push_to_hub  # loaded only under --push_to_hub

            check_push_to_hub(training)
        # `last` means the newest complete checkpoint (training/resume.py); a bad value fails here, not after loading.
        if resume_requested(training.resume_from_checkpoint):
            from recipes_lib.training.resume import FractionStepsWarningFilter, resolve_resume_checkpoint

            self.resume_from = resolve_resume_checkpoint(
                training.resume_from_checkpoint, training.output_dir, RESULTS_FILE
            )
            # transformers' false "arguments do not match" (resume.py)
            logging.getLogger(FractionStepsWarningFilter.LOGGER).addFilter(
                FractionStepsWarningFilter(self.resume_from)
            )
        set_seed(training.seed)
        # Locked, then checked; held until __exit__.
        self.output_lock = claim_output_dir(training, self.is_main_process)
        return self

    def __exit__(self, error_type, error, traceback) -> bool:
        self.output_lock.close()
        if self.resume_from is not None:
            from recipes_lib.training.resume import FractionStepsWarningFilter

            resume_logger = logging.getLogger(FractionStepsWarningFilter.LOGGER)
            for added in [f for f in resume_logger.filters if isinstance(f, FractionStepsWarningFilter)]:
                resume_logger.removeFilter(added)
        if error is not None:
            if self.probes is not None:  # an exception inside a tracked step left its tracker open
                self.probes.memory.stop_tracking(keep_breakdown=False)
            if self.tracker is not None and self.tracker.active:
                self.tracker.run.finish(exit_code=1)
                self.tracker = None
        return False  # an exception goes on to run_main (or the caller)

    def start_tracking(self, prepared: Prepared) -> None:
        """Start the W&B run (main process; offline without an API key; config: `prepared.arguments`), before
        the model so the Trainer's WandbCallback logs into it, then the memory phases (W&B not counted in them)."""
        if "wandb" in (self.arguments.training.report_to or []):
            # tracking/wandb_run.py (and wandb) load only for a run that reports to W&B
            from recipes_lib.tracking.wandb_run import start_tracking

            self.tracker = start_tracking(prepared.arguments, self.spec)
        self._start_memory_phases()

    def _start_memory_phases(self) -> None:
        training = self.arguments.training
        memory = MemoryMonitor(training.device, track_tensors=training.track_memory)
        memory.start_phase("model_load")  # lasts until the first training step
        tokens = TokenCounter.resumed_from(self.resume_from, self.is_main_process)
        self.probes = RunProbes(memory, tokens, PrecisionProbe(training.device.type), LastEpochEvaluation())

    def callbacks(self, model) -> list:
        """The run's Trainer callbacks; without `start_tracking()` first, the memory phases start here."""
        training = self.arguments.training
        if self.probes is None:
            self._start_memory_phases()
        total, trainable = count_parameters(model)
        logger.info(
            "Model: %s, %s parameters, %s trainable",
            self.arguments.model.model_name_or_path,
            f"{total:,}",
            f"{trainable:,}",
        )
        callbacks = [
            MemoryCallback(self.probes.memory),
            self.probes.tokens,
            LogAtCheckpoints(),  # the loss at each checkpoint: a resumed run's record covers every step
            self.probes.precision,
            self.probes.last_epoch,
            CollapseWarning(),  # issue #50: a model whose outputs do not depend on the input, said at once
            *(self.tracker.callbacks(self.probes.tokens) if self.tracker is not None else []),
        ]
        if training.early_stopping_patience is not None:
            callbacks.append(EarlyStoppingCallback(early_stopping_patience=training.early_stopping_patience))
        return callbacks

    def clear_previous_run(self) -> None:
        """--overwrite_output_dir: delete the previous run's files now that every check has passed."""
        training = self.arguments.training
        if training.overwrite_output_dir and self.resume_from is None and self.is_main_process:
            clear_previous_run(training.output_dir, RESULTS_FILE)

    def final_evaluation(self, trainer) -> PredictionOutput:
        """The final evaluation as `trainer.predict` gives it: the last epoch's when the weights are unchanged since
        (same step, same tensors), else `trainer.evaluate()`; the predictions the run's compute_metrics last saw."""
        # The MemoryCallback measures the weights when a Trainer is built with it.
        fed = self.probes is not None and self.probes.memory.weights_bytes is not None
        if not fed or not hasattr(trainer.compute_metrics, "last_predictions"):
            raise RuntimeError(
                "The run's record is fed by its callbacks and its compute_metrics: hand the Trainer "
                "callbacks=run.callbacks(model) (with your own beside them, if any) and "
                "compute_metrics=prepared.metrics."
            )
        metrics = final_metrics(trainer, self.probes.last_epoch)
        seen = trainer.compute_metrics.last_predictions  # an EvalPrediction
        return PredictionOutput(seen.predictions, seen.label_ids, metrics)

    def write_results(
        self, trainer, train_result, evaluation: PredictionOutput, prepared: Prepared, merged=None
    ) -> RunResults:
        """Predictions, results.json, the W&B summary, the card and --push_to_hub's second push (run/record.py);
        returns the record. `merged`: --merge_adapter's model (save_adapter_extras), scored in memory."""
        # The end-of-run writers (the record, predictions, the card, the checks) load when a run finishes.
        from recipes_lib.run.record import RunSettings, finish_run, publish_results

        memory = self.probes.memory.finish()
        for line in self.probes.memory.summary_lines(memory):
            logger.info(line)
        # A run resumed at its end ran no layer: the planned precision.
        planned = prepared.precision.precision
        precision = self.probes.precision.observed or planned
        if precision != planned:
            logger.warning("Asked for %s, but the model computed in %s.", planned, precision)
        memory = {**peak_memory(trainer.args.device, self.probes.memory), **memory}
        tokens = self.probes.tokens.totals(trainer.accelerator)  # the run's last collective step
        merged_scores = {}  # measured after the peaks, which the merged model's pass would raise
        if merged is not None:  # --merge_adapter: run/merged.py loads for it only
            from recipes_lib.run.merged import evaluate_merged_model

            merged_scores = evaluate_merged_model(trainer, merged, prepared.data, prepared.arguments.data)
        settings = RunSettings(
            recipe=self.spec.name,
            arguments=prepared.arguments,
            data=prepared.data,
            class_weights=prepared.metrics.class_weights,
            model_type=prepared.model_config.model_type,
            adapters=prepared.adapters,
            precision=precision,
            precision_reason=prepared.precision.reason,
            quantized_compute=self.probes.precision.quantized_compute,
            memory=memory,
            tokens=tokens,
            device=describe_device(trainer.args.device),
            resumed_from=self.resume_from,
            batch_choice=prepared.batch_choice,
            merged=merged_scores,
        )
        results = finish_run(trainer, train_result, evaluation, settings)
        if self.tracker is not None:
            self.tracker.finish(results)  # every results.json key into the W&B summary, same names
        publish_results(trainer, results, self.spec)  # the model card, the closing lines, --push_to_hub
        return results


def run_main(main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> Any:
    """Call a recipe's `main(argv)`; a user error becomes one paragraph on stderr and its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return main(argv)
    except RecipeError as error:
        if wants_traceback(argv):
            raise
        hint = "\n(run again with --debug for the traceback)" if error.offer_traceback else ""
        print(redact(f"\n{error.heading}: {error}{hint}"), file=sys.stderr)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        # Ctrl-C before training started (nothing to save yet), or a second Ctrl-C during it.
        print("\ninterrupted: stopped at once; no new checkpoint was written.", file=sys.stderr)
        sys.exit(130)
