"""Memory: what a run holds, phase by phase (model load, training, evaluation), and what holds it:
`memory_phases` and `memory_breakdown_gib`, measured on the steps that can set a new peak (the first
optimizer step, then each larger batch). docs/memory.md says what each figure means and how it is measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch
from transformers import TrainerCallback

from recipes_lib.memory.peaks import peak_rss_gib, read_kernel_peak_rss, reset_kernel_peak_rss
from recipes_lib.memory.tensors import TensorMemoryTracker, gradient_tensors, storage_bytes, weight_tensors
from recipes_lib.modeling.optimizers import optimizer_state_tensors
from recipes_lib.units import BREAKDOWN_KEYS, GIB


def _gib(value: int | None, digits: int) -> float | None:
    return None if value is None else round(value / GIB, digits)


@dataclass
class PhaseMemory:
    name: str
    max_allocated: int | None = None
    max_reserved: int | None = None
    max_active: int | None = None
    allocated_at_end: int | None = None
    reserved_at_end: int | None = None
    peak_rss: int | None = None
    # CUDA: total - free device memory at the end of the phase (cudaMemGetInfo): this process's
    # reserved memory + the CUDA context and workspace + any other process on the GPU.
    device_used: int | None = None
    tensor_peak: int | None = None  # from the tracker, both devices
    tracked_batches: int = 0

    def to_dict(self, device_type: str) -> dict[str, Any]:
        """Each byte figure in GiB, as "<field>_gib", in field order; max_allocated is the tensor peak on a CPU."""
        allocated = self.max_allocated if device_type == "cuda" else self.tensor_peak
        figures = {f"{name}_gib": _gib(getattr(self, name), 4) for name in GIB_FIELDS}
        return {**figures, "max_allocated_gib": _gib(allocated, 4), "tracked_batches": self.tracked_batches}


# The byte figures of a phase: every field but its name and count.
GIB_FIELDS = tuple(item.name for item in fields(PhaseMemory) if item.name not in ("name", "tracked_batches"))


def _dominated(shape: tuple[int, int], shapes: list[tuple[int, int]]) -> bool:
    return any(rows >= shape[0] and length >= shape[1] for rows, length in shapes)


def batch_inputs(args, kwargs) -> dict:
    """A forward pre-hook's inputs (with_kwargs=True), as the dict of the batch."""
    return kwargs if kwargs else (args[0] if args and isinstance(args[0], dict) else {})


def _batch_shape(inputs: Any) -> tuple[int, int] | None:
    for name in ("input_ids", "attention_mask", "inputs_embeds"):
        tensor = inputs.get(name) if isinstance(inputs, dict) else None
        if isinstance(tensor, torch.Tensor) and tensor.dim() >= 2:
            return int(tensor.shape[0]), int(tensor.shape[1])
    return None


@dataclass
class MemoryMonitor:
    """Collects per-phase peaks and the training breakdown of one run (one process)."""

    device: torch.device
    track_tensors: bool = True
    phases: dict[str, PhaseMemory] = field(default_factory=dict)
    current: PhaseMemory | None = None
    process_peak_rss: int = 0
    breakdown: dict[str, int] = field(default_factory=dict)
    tracker: TensorMemoryTracker | None = None
    tracked_shapes: dict[str, list] = field(default_factory=lambda: {"train": [], "evaluation": []})
    tracked_optimizer_steps: int = 0
    weights_bytes: int | None = None
    # The batch being tracked, and the one whose activations set the peak: (rows, length, padded).
    tracked_batch: tuple[int, int, bool] | None = None
    peak_batch: tuple[int, int, bool] | None = None

    # Phases ------------------------------------------------------------------------------------------
    def start_phase(self, name: str) -> None:
        if self.current is not None:
            if self.current.name == name:
                return
            self.end_phase()
        # A phase seen before (training resumes after an evaluation) keeps its peaks.
        self.current = self.phases.setdefault(name, PhaseMemory(name))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self._remember_rss()
        reset_kernel_peak_rss()

    def end_phase(self) -> None:
        phase, self.current = self.current, None
        if phase is None:
            return
        self.stop_tracking()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            stats = torch.cuda.memory_stats(self.device)
            phase.max_allocated = max(phase.max_allocated or 0, stats.get("allocated_bytes.all.peak", 0))
            phase.max_reserved = max(phase.max_reserved or 0, stats.get("reserved_bytes.all.peak", 0))
            phase.max_active = max(phase.max_active or 0, stats.get("active_bytes.all.peak", 0))
            phase.allocated_at_end = stats.get("allocated_bytes.all.current", 0)
            phase.reserved_at_end = stats.get("reserved_bytes.all.current", 0)
            free, total = torch.cuda.mem_get_info(self.device)
            phase.device_used = total - free
        rss = read_kernel_peak_rss()
        if rss is not None:
            phase.peak_rss = max(phase.peak_rss or 0, rss)
        self._remember_rss()

    def _remember_rss(self) -> None:
        # The kernel's peak is reset per phase; keep the whole run's peak here.
        rss = read_kernel_peak_rss()
        self.process_peak_rss = max(self.process_peak_rss, rss or 0, int(peak_rss_gib() * GIB))

    def model_loaded(self, model: torch.nn.Module) -> None:
        """Weights measured on the loaded model: what it holds before any training step."""
        self.weights_bytes = storage_bytes(weight_tensors(model), self.device.type)
        if self.current is not None and self.device.type != "cuda":
            self.current.allocated_at_end = self.weights_bytes
            self.current.tensor_peak = max(self.current.tensor_peak or 0, self.weights_bytes)

    # Tracked batches -------------------------------------------------------------------------------
    def before_forward(self, model: torch.nn.Module, inputs: dict, optimizer, training: bool) -> None:
        """Called at the start of every forward: switch phase, and watch this batch if it can set a peak."""
        phase = "train" if training else "evaluation"
        self.start_phase(phase)
        if not self.track_tensors or self.tracker is not None:
            return
        shape = _batch_shape(inputs)
        # The first step runs without optimizer state, so a batch like it with the state in place
        # holds more: it does not count as covering later batches.
        first_step = training and self.tracked_optimizer_steps == 0
        if shape is None or (not first_step and _dominated(shape, self.tracked_shapes[phase])):
            return
        if not first_step:
            self.tracked_shapes[phase].append(shape)
        self.current.tracked_batches += 1
        mask = inputs.get("attention_mask")
        padded = isinstance(mask, torch.Tensor) and bool((mask == 0).any())
        self.tracked_batch = (*shape, padded)
        self.tracker = TensorMemoryTracker(model, optimizer if training else None, inputs)
        self.tracker.__enter__()

    def stop_tracking(self, optimizer_stepped: bool = False, keep_breakdown: bool = True) -> None:
        """End the tracked batch. `keep_breakdown=False`: a step that failed (out of memory) and is
        retried with a smaller batch; its peak stays in the phase's figures, not in the breakdown."""
        tracker, self.tracker = self.tracker, None
        if tracker is None:
            return
        tracker.__exit__(None, None, None)
        phase = self.current
        if phase is not None:
            phase.tensor_peak = max(phase.tensor_peak or 0, tracker.peak_total)
            if phase.name == "train" and keep_breakdown:
                measured = tracker.breakdown_bytes()
                if measured["activations"] > self.breakdown.get("activations", -1):
                    self.peak_batch = self.tracked_batch
                self.breakdown = {
                    key: max(self.breakdown.get(key, 0), measured[key]) for key in BREAKDOWN_KEYS
                }
        if optimizer_stepped:
            self.tracked_optimizer_steps += 1

    def measure_untracked(self, model: torch.nn.Module, optimizer) -> None:
        """What costs nothing to measure without the tracker: gradients and optimizer state by walking them."""
        gradients = storage_bytes(gradient_tensors(model), self.device.type)
        state = storage_bytes(optimizer_state_tensors(optimizer), self.device.type)
        self.breakdown["gradients"] = max(self.breakdown.get("gradients", 0), gradients)
        self.breakdown["optimizer_state"] = max(self.breakdown.get("optimizer_state", 0), state)

    # Results -------------------------------------------------------------------------------------
    def finish(self) -> dict[str, Any]:
        self.end_phase()
        breakdown = dict(self.breakdown)
        if self.weights_bytes is not None:
            breakdown["weights"] = max(breakdown.get("weights", 0), self.weights_bytes)
        tracked = self.track_tensors and "activations" in breakdown
        # Nine decimals keep byte resolution, so a tiny test model's figures stay exact.
        breakdown_gib = {key: _gib(breakdown.get(key), 9) for key in BREAKDOWN_KEYS}
        if self.device.type == "cuda":
            source = "torch.cuda.memory_stats per phase (peaks reset between phases)"
        else:
            source = "tensor-level tracking (TensorMemoryTracker) per phase; RSS from /proc/self/status VmHWM"
        train = self.phases.get("train")
        return {
            "memory_phases": {name: phase.to_dict(self.device.type) for name, phase in self.phases.items()},
            "memory_phases_source": source,
            "memory_breakdown_gib": breakdown_gib,
            "memory_breakdown_source": (
                "peak of each kind over the tracked training steps (tensor-level tracking)"
                if tracked
                else "weights, gradients and optimizer state walked on the tensors; activations not tracked "
                "(--track_memory false)"
            ),
            "tensor_peak_gib": _gib(train.tensor_peak if train is not None else None, 6),
            "memory_tracked_steps": self.tracked_optimizer_steps,
            # The training batch whose activations were the highest: what to give the planner to compare.
            "memory_peak_batch": (
                dict(zip(("rows", "length", "padded"), self.peak_batch, strict=True))
                if self.peak_batch
                else None
            ),
        }

    def summary_lines(self, results: dict[str, Any]) -> list[str]:
        lines = []
        for name, phase in results["memory_phases"].items():
            figures = ", ".join(
                f"{label} {format_gib(phase[key])}"
                for key, label in (
                    ("max_allocated_gib", "max allocated"),
                    ("max_reserved_gib", "max reserved"),
                    ("max_active_gib", "max active"),
                    ("peak_rss_gib", "peak RSS"),
                )
                if phase.get(key) is not None
            )
            lines.append(f"Memory, {name}: {figures}")
        breakdown = results["memory_breakdown_gib"]
        parts = ", ".join(
            f"{key.replace('_', ' ')} {format_gib(value)}"
            for key, value in breakdown.items()
            if value is not None
        )
        lines.append(f"Memory breakdown (peak of each kind): {parts}")
        return lines


def format_gib(gib: float) -> str:
    """1.23 GiB, or 45.6 MiB below 1 GiB (a small model's figures would all read 0.00 GiB)."""
    return f"{gib:.2f} GiB" if gib >= 1 else f"{gib * 1024:.1f} MiB"


class MemoryCallback(TrainerCallback):
    """Feeds the Trainer's events to a MemoryMonitor: phase switches, tracked steps, evaluation."""

    # Gradients and optimizer state keep their size after the first step: walking them on the first
    # two steps (free, and what --track_memory false still reports) is enough.
    WALKED_STEPS = 2

    def __init__(self, monitor: MemoryMonitor):
        self.monitor = monitor
        self.optimizer = None
        self._hook = None
        self._steps_seen = 0
        self._train_began = False

    def on_init_end(self, args, state, control, model=None, **kwargs):
        # The Trainer is built around the finished model (adapters added, 4-bit base loaded): what
        # its weights hold now is what every training step holds.
        if model is not None and self._hook is None:
            self.monitor.model_loaded(model)
            self._hook = model.register_forward_pre_hook(self._before_forward, with_kwargs=True)

    # Under --torch_compile the hook runs inside the compiled call: dynamo would trace this
    # bookkeeping (Python state, data-dependent checks), break the graph on it and recompile as
    # the state changes. Run it as plain Python instead.
    @torch.compiler.disable
    def _before_forward(self, module, args, kwargs):
        training = module.training and torch.is_grad_enabled()
        self.monitor.before_forward(module, batch_inputs(args, kwargs), self.optimizer, training)

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        if self._train_began:
            # Training starts again: --auto_batch_size retrying after an out-of-memory error. The failed
            # step's peak stays in the phase's figures, not in the breakdown of what a step holds.
            self.monitor.stop_tracking(keep_breakdown=False)
        self._train_began = True
        self.optimizer = optimizer

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        self.optimizer = optimizer

    def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        # Gradients are complete here; walking them is free, and it covers untracked runs.
        if self._steps_seen < self.WALKED_STEPS and model is not None:
            self.monitor.measure_untracked(model, None)

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self._steps_seen < self.WALKED_STEPS and model is not None:
            self.monitor.measure_untracked(model, optimizer)
        self._steps_seen += 1
        self.monitor.stop_tracking(optimizer_stepped=True)

    def on_prediction_step(self, args, state, control, **kwargs):
        self.monitor.stop_tracking()

    def on_evaluate(self, args, state, control, **kwargs):
        self.monitor.end_phase()

    def on_train_end(self, args, state, control, **kwargs):
        self.monitor.end_phase()
