"""Callbacks through which a run counts and records itself while the Trainer trains (memory phases:
memory/monitor.py; W&B: tracking/); TokenCounter and PrecisionProbe watch the model's forwards."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState, TrainerState

from recipes_lib.config.precision import dtype_name
from recipes_lib.evaluation.collapse import is_collapsed
from recipes_lib.memory.monitor import batch_inputs

logger = logging.getLogger("recipes_lib")


class TokenCounter(TrainerCallback, ExportableState):
    """Counts the real and padded tokens of this process's training forwards; `earlier` holds the whole
    run's counts before a resume, kept in the checkpoint's trainer_state.json (an ExportableState's state,
    the main process's only: docs/results-format.md, `pad_ratio`)."""

    def __init__(self, earlier_real: int = 0, earlier_padded: int = 0):
        self.real = 0
        self.padded = 0
        self.earlier = (earlier_real, earlier_padded)
        self._hook = None

    @classmethod
    def resumed_from(cls, checkpoint: str | None, main_process: bool) -> TokenCounter:
        """The counter of a run resumed from `checkpoint` (None: a new one), continuing its counts on the main
        process: read here, as under --early_stopping_patience the Trainer swaps in new stateful callbacks."""
        state_file = Path(checkpoint, "trainer_state.json") if checkpoint and main_process else None
        if state_file is None or not state_file.is_file():
            return cls()
        saved = TrainerState.load_from_json(str(state_file)).stateful_callbacks.get(cls.__name__)
        counts = (saved[0] if isinstance(saved, list) and saved else saved or {}).get("args") or {}
        return cls(int(counts.get("earlier_real", 0)), int(counts.get("earlier_padded", 0)))

    def state(self) -> dict:
        run_real, run_padded = self.earlier[0] + self.real, self.earlier[1] + self.padded
        return {"args": {"earlier_real": run_real, "earlier_padded": run_padded}, "attributes": {}}

    def on_init_end(self, args, state, control, model=None, **kwargs):
        if model is not None and self._hook is None:
            self._hook = model.register_forward_pre_hook(self._count, with_kwargs=True)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.on_init_end(args, state, control, model=model)  # a callback the Trainer restored has no hook yet

    # Under --torch_compile the hook would otherwise be traced into the graph (it is plain bookkeeping).
    @torch.compiler.disable
    def _count(self, module, args, kwargs):
        attention_mask = batch_inputs(args, kwargs).get("attention_mask")
        if attention_mask is not None and module.training and torch.is_grad_enabled():
            self.real += int(attention_mask.sum())
            self.padded += attention_mask.numel()

    def totals(self, accelerator) -> tuple[int, int, int]:
        """(real tokens, all tokens) of the whole run's training batches, resumes included, and the real
        tokens of this process's steps, over every process: a collective step."""
        counts = torch.tensor(
            [self.earlier[0] + self.real, self.earlier[1] + self.padded, self.real], device=accelerator.device
        )
        counts = accelerator.reduce(counts, reduction="sum")
        return int(counts[0]), int(counts[1]), int(counts[2])

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


class PrecisionProbe(TrainerCallback):
    """Records the precision the model's layers really ran in, during the first training forward: a pre-hook
    on the first linear layer reads the autocast state inside the model (`observed`: "bf16", "fp16" or
    "fp32"), one on a 4-bit layer the dtype its matmuls use (`quantized_compute`; None without one)."""

    def __init__(self, device_type: str):
        self.device_type = device_type
        self.observed: str | None = None
        self.quantized_compute: str | None = None
        self._handles = []

    def on_init_end(self, args, state, control, model=None, **kwargs):
        if model is None or self._handles:
            return
        linear = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
        if linear is not None:
            self._handles.append(linear.register_forward_pre_hook(self._record))
        quantized = next((m for m in model.modules() if hasattr(m, "compute_dtype")), None)
        if quantized is not None:
            self._handles.append(quantized.register_forward_pre_hook(self._record_quantized))

    def _record(self, module, inputs):
        if self.observed is None and module.training:
            if torch.is_autocast_enabled(self.device_type):
                dtype = torch.get_autocast_dtype(self.device_type)
            else:
                dtype = next((x.dtype for x in inputs if torch.is_tensor(x)), torch.float32)
            self.observed = dtype_name(dtype)

    def _record_quantized(self, module, inputs):
        if self.quantized_compute is None and module.training:
            dtype = module.compute_dtype
            if dtype is None:  # bitsandbytes then computes in the input's dtype
                dtype = next((x.dtype for x in inputs if torch.is_tensor(x)), torch.float32)
            self.quantized_compute = dtype_name(dtype)

    def on_train_end(self, args, state, control, **kwargs):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class CollapseWarning(TrainerCallback):
    """A warning at the first evaluation during training whose predictions do not depend on the input
    (`eval_output_std`, `eval_distinct_predictions`), once per run, by the main process; `said_at` is its
    step (None: not said). An evaluation after training is the end of the run's, which says it (run/record.py).
    """

    def __init__(self):
        self.said_at: int | None = None
        self.training = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.training = True

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not self.training or self.said_at is not None or not metrics or not state.is_world_process_zero:
            return
        prefix = next((key[: -len("output_std")] for key in metrics if key.endswith("output_std")), None)
        if prefix is None:
            return
        variation = {
            "output_std": metrics[f"{prefix}output_std"],
            "distinct_predictions": metrics[f"{prefix}distinct_predictions"],
            "rows": metrics.get(f"{prefix}samples", 2),
        }
        if is_collapsed(variation):
            from recipes_lib.evaluation.collapse_note import collapse_note

            self.said_at = state.global_step
            logger.warning(
                collapse_note(
                    variation,
                    learning_rate=args.learning_rate,
                    warmup_steps=args.warmup_steps,
                    epochs=args.num_train_epochs,
                    max_steps=args.max_steps if args.max_steps > 0 else None,
                    when=f"at step {state.global_step} (epoch {state.epoch or 0:.2g})",
                    problem_type=getattr(getattr(kwargs.get("model"), "config", None), "problem_type", None),
                    class_weights=getattr(args, "class_weights", None),
                )
            )


def weights_version(model: torch.nn.Module, step: int) -> tuple:
    """The step, the model, and each parameter's identity and in-place version counter (torch advances
    it on every in-place write: optimizer steps, load_state_dict, merging)."""
    return (step, id(model), tuple((id(p), p._version) for p in model.parameters()))


class LastEpochEvaluation(TrainerCallback):
    """The metrics of the last evaluation inside `train()`, and the weights it scored; forgotten on any
    evaluation or prediction after training (the run's compute_metrics then holds another pass)."""

    def __init__(self):
        self.training = False
        self.last: tuple[tuple, dict] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.training, self.last = True, None

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False

    def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
        keep = self.training and model is not None and metrics is not None
        self.last = (weights_version(model, state.global_step), dict(metrics)) if keep else None

    def on_predict(self, args, state, control, **kwargs):
        self.last = None


def final_metrics(trainer, last: LastEpochEvaluation) -> dict:
    """`trainer.evaluate()`, or the last epoch's evaluation when it scored these very weights (docs/speed.md,
    "Fixed costs of a small run"); not under load_best_model_at_end; under several processes only if all can."""
    reusable = (
        last.last is not None
        and not isinstance(trainer.eval_dataset, dict)
        and not trainer.args.load_best_model_at_end
        and last.last[0] == weights_version(trainer.model, trainer.state.global_step)
    )
    if trainer.args.world_size > 1:
        flag = torch.tensor([int(reusable)], device=trainer.args.device)
        reusable = bool(trainer.accelerator.gather(flag).min())
    return dict(last.last[1]) if reusable else trainer.evaluate()
