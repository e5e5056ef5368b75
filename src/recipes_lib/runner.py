"""One run of a recipe, in phases: arguments, data, model, trainer, train, evaluate, save.

A recipe script describes what makes it that recipe (its extra arguments, how it changes the model,
which optimizer it uses) as a `Recipe` and hands it to `run_recipe`. Everything else is shared.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import transformers
from transformers import set_seed

from recipes_lib.autofit import choose_batch_size, train_with_out_of_memory_backoff
from recipes_lib.checkpoints import clear_previous_run, resolve_resume_checkpoint, resume_requested
from recipes_lib.config import ParsedArguments, parse_recipe_arguments
from recipes_lib.data import load_classification_data, padding_collator, tokenize
from recipes_lib.errors import OutputDirError, RecipeError
from recipes_lib.memory import MemoryCallback, MemoryMonitor, peak_memory
from recipes_lib.metrics import build_compute_metrics
from recipes_lib.modeling import (
    check_sequence_length,
    count_parameters,
    load_model,
    load_model_config,
    load_tokenizer,
)
from recipes_lib.optimizers import optimizer_state_summary
from recipes_lib.precision import AutocastProbe
from recipes_lib.results import RESULTS_FILE, describe_device, library_versions, timestamp, write_results
from recipes_lib.tracking import start_tracking
from recipes_lib.trainer import RecipeTrainer

logger = logging.getLogger("recipes_lib")


def default_build_model(arguments: ParsedArguments, model_config):
    return load_model(arguments.model, model_config)


@dataclass(frozen=True)
class Recipe:
    """What one recipe script owns. Every field but `name` has a full fine-tuning default."""

    name: str
    # Extra argument dataclasses, parsed like the shared ones (YAML + command line).
    argument_classes: tuple[type, ...] = ()
    # Overrides of the shared defaults, e.g. a higher learning rate for LoRA.
    training_defaults: Mapping[str, Any] = field(default_factory=dict)
    # (arguments, model config) -> model ready to train.
    build_model: Callable[[ParsedArguments, Any], Any] = default_build_model
    # (model, arguments) -> optimizer; None lets the Trainer build the one `--optim` names.
    create_optimizer: Callable[[Any, ParsedArguments], Any] | None = None
    # (arguments, model config, trainer) -> None: files the recipe adds to output_dir after the
    # model is saved (LoRA: the task config, the merged model). Runs on the main process only.
    save_extras: Callable[[ParsedArguments, Any, Any], None] | None = None
    # (arguments) -> None, raising a RecipeError: what the recipe needs from the machine, checked
    # before any data or weights load (QLoRA: bitsandbytes can run 4-bit on the training device).
    preflight: Callable[[ParsedArguments], None] | None = None


def load_recipe_script(path: str | os.PathLike) -> Recipe:
    """The `RECIPE` a recipe script defines, imported from its file (its `__main__` block does not run)."""
    import importlib.util

    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"_recipe_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RECIPE


def setup_logging(arguments: ParsedArguments) -> None:
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", stream=sys.stdout
    )
    # Only the main process talks at INFO; the others would print every line N times.
    logger.setLevel(logging.INFO if arguments.training.should_log else logging.WARNING)
    log_level = arguments.training.get_process_log_level()
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)


# Files that mean "another run lives here".
_RUN_MARKERS = (RESULTS_FILE, "model.safetensors", "adapter_model.safetensors", "checkpoint-*")


def check_output_dir(arguments: ParsedArguments) -> None:
    """Refuse to write over another run unless asked to resume it or to overwrite it."""
    training = arguments.training
    output_dir = Path(training.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputDirError(f"--output_dir '{output_dir}' is a file, not a directory. Pick another path.")
    resuming = resume_requested(training.resume_from_checkpoint)
    if not output_dir.is_dir() or training.overwrite_output_dir or resuming:
        return
    found = sorted({path.name for marker in _RUN_MARKERS for path in output_dir.glob(marker)})
    if found:
        raise OutputDirError(
            f"The output directory '{output_dir}' already holds a run ({', '.join(found[:3])}). Nothing was "
            "changed. Pick another --output_dir, continue that run with --resume_from_checkpoint last, or "
            "replace it with --overwrite_output_dir."
        )


def train_and_evaluate(recipe: Recipe, arguments: ParsedArguments) -> dict[str, Any]:
    model_args, data_args, training_args = arguments.model, arguments.data, arguments.training
    check_output_dir(arguments)
    # `last` means the newest complete checkpoint (checkpoints.py); a bad value fails here, not after loading.
    resume_from = resolve_resume_checkpoint(
        training_args.resume_from_checkpoint, training_args.output_dir, RESULTS_FILE
    )
    if recipe.preflight is not None:
        recipe.preflight(arguments)
    set_seed(training_args.seed)

    # Cheapest checks first. The tokenizer and config.json are small: a wrong model name or a
    # max_seq_length the model cannot take fails before a dataset download. Then every check on
    # columns and labels runs before tokenization and before the model weights are fetched.
    tokenizer = load_tokenizer(model_args)
    base_config = load_model_config(model_args)
    check_sequence_length(data_args.max_seq_length, base_config, tokenizer)
    training_args.settle_precision(base_config.model_type)  # DeBERTa stays out of automatic fp16
    logger.info("Precision: %s (%s)", training_args.precision, training_args.precision_choice.reason)
    data = load_classification_data(data_args, cache_dir=model_args.cache_dir, seed=training_args.seed)
    model_config = load_model_config(model_args, data.labels)
    logger.info(
        "Data: %s, %d train / %d validation examples, %d classes (%s), text: %s",
        data.description,
        len(data.raw["train"]),
        len(data.raw["validation"]),
        data.labels.num_labels,
        ", ".join(data.labels.names[:10]),
        " + ".join(data.text_columns),
    )
    tokenized = tokenize(data, tokenizer, data_args, training_args.main_process_first)

    # The W&B run starts before the Trainer, whose WandbCallback then logs into it (tracking.py), and
    # before the memory phases, so that starting it is not counted as loading the model.
    tracker = start_tracking(arguments, recipe)
    # Memory per phase (memory.py); the model-load phase lasts until the first training step.
    memory = MemoryMonitor(training_args.device, track_tensors=training_args.track_memory)
    memory.start_phase("model_load")
    model = recipe.build_model(arguments, model_config)
    memory.model_loaded(model)
    # What the layers really compute in, read during the first training step (precision.py).
    precision_probe = AutocastProbe(model, training_args.device.type)
    # --auto_batch_size: the largest per-device batch that fits, same effective batch (autofit.py).
    auto_batch = None
    if training_args.auto_batch_size:
        auto_batch = choose_batch_size(arguments, recipe.name, model_config)
    params_total, params_trainable = count_parameters(model)
    logger.info(
        "Model: %s, %s parameters, %s trainable",
        model_args.model_name_or_path,
        f"{params_total:,}",
        f"{params_trainable:,}",
    )

    optimizer = recipe.create_optimizer(model, arguments) if recipe.create_optimizer else None
    trainer = RecipeTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        processing_class=tokenizer,
        data_collator=padding_collator(tokenizer, data_args, training_args.device),
        compute_metrics=build_compute_metrics(data.labels.num_labels),
        optimizers=(optimizer, None),
        callbacks=[MemoryCallback(memory)],
    )
    tracker.watch(trainer)

    if training_args.overwrite_output_dir and resume_from is None and trainer.is_world_process_zero():
        clear_previous_run(training_args.output_dir, RESULTS_FILE)  # every check has passed by now
    # SIGINT/SIGTERM or a NaN loss end train() with a RecipeError: no final model, no results.json.
    if auto_batch is not None:
        train_result = train_with_out_of_memory_backoff(
            trainer,
            auto_batch,
            resume_from,
            on_out_of_memory=lambda: memory.stop_tracking(keep_breakdown=False),
        )
    else:
        train_result = trainer.train(resume_from_checkpoint=resume_from)
    trainer.save_model()  # model (safetensors) + tokenizer in output_dir, on the main process
    if recipe.save_extras is not None and trainer.is_world_process_zero():
        recipe.save_extras(arguments, model_config, trainer)
    trainer.log_metrics("train", train_result.metrics)
    eval_metrics = trainer.evaluate()
    trainer.log_metrics("eval", eval_metrics)
    memory_results = memory.finish()
    precision_probe.remove()
    precision = precision_probe.observed or training_args.precision  # resumed at the end: nothing ran
    if precision != training_args.precision:
        logger.warning("Asked for %s, but the model computed in %s.", training_args.precision, precision)
    for line in memory.summary_lines(memory_results):
        logger.info(line)

    real_tokens, all_tokens = trainer.token_counts()
    runtime = train_result.metrics["train_runtime"]
    results = {
        "recipe": recipe.name,
        "model_name_or_path": model_args.model_name_or_path,
        "dataset": data.description,
        "num_labels": data.labels.num_labels,
        "eval_accuracy": eval_metrics.get("eval_accuracy"),
        "eval_f1": eval_metrics.get("eval_f1"),
        "eval_loss": eval_metrics.get("eval_loss"),
        # Counted from the predictions gathered over all processes (metrics.py), not len(dataset): a
        # duplicated or dropped validation example under several processes would show here.
        "eval_samples": eval_metrics["eval_samples"],
        "train_samples": len(tokenized["train"]),
        "train_loss": train_result.metrics.get("train_loss"),
        "train_steps": trainer.state.global_step,
        "epochs": trainer.state.epoch,
        "train_runtime_s": round(runtime, 3),
        "train_samples_per_s": train_result.metrics.get("train_samples_per_second"),
        "train_tokens_per_s": round(real_tokens / runtime, 2) if runtime > 0 else None,
        "pad_ratio": round(1 - real_tokens / all_tokens, 4) if all_tokens else None,
        "params_total": params_total,
        "params_trainable": params_trainable,
        # What the optimizer's state tensors hold after training, measured (see optimizers.py).
        **optimizer_state_summary(trainer.optimizer, trainer.model),
        **peak_memory(training_args.device, memory),
        **memory_results,
        "auto_batch_size": auto_batch.to_dict() if auto_batch is not None else None,
        "device": describe_device(training_args.device),
        "num_processes": training_args.world_size,
        # Read from the autocast state inside the model during training, not from the flags.
        "precision": precision,
        "precision_reason": training_args.precision_choice.reason,
        # QLoRA: the dtype of the 4-bit layers' matmuls (bitsandbytes' compute dtype); else None.
        "quantized_compute_dtype": precision_probe.quantized_compute,
        "versions": library_versions(),
        "created_at": timestamp(),
        "output_dir": str(training_args.output_dir),
        "config": arguments.to_dict(),
    }
    if trainer.is_world_process_zero():
        path = write_results(training_args.output_dir, results)
        logger.info(
            "Done: accuracy %.4f, macro-F1 %.4f, %.1f samples/s, peak memory %.2f GiB. Model and %s in %s",
            results["eval_accuracy"],
            results["eval_f1"],
            results["train_samples_per_s"],
            results["peak_memory_gib"],
            path.name,
            training_args.output_dir,
        )
    tracker.finish(results)  # every results.json key into the W&B summary, same names
    return results


def _report_error(error: RecipeError, show_traceback: bool) -> None:
    if show_traceback:
        raise error
    hint = "\n(run again with --debug for the traceback)" if error.offer_traceback else ""
    print(f"\n{error.heading}: {error}{hint}", file=sys.stderr)
    sys.exit(error.exit_code)


def run_recipe(recipe: Recipe, argv: list[str] | None = None) -> dict[str, Any] | None:
    """Parse arguments and train; a user error becomes one paragraph on stderr and exit code 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    show_traceback = "--debug" in argv or os.environ.get("RECIPES_DEBUG", "") not in ("", "0")
    try:
        arguments = parse_recipe_arguments(
            recipe.name,
            argv,
            extra_argument_classes=recipe.argument_classes,
            recipe_defaults=recipe.training_defaults,
        )
        setup_logging(arguments)
        return train_and_evaluate(recipe, arguments)
    except RecipeError as error:
        _report_error(error, show_traceback)
    except KeyboardInterrupt:
        # Ctrl-C before training started (nothing to save yet), or a second Ctrl-C during it.
        print("\ninterrupted: stopped at once; no new checkpoint was written.", file=sys.stderr)
        sys.exit(130)
