"""How a model trains, as the planner sees it: a `Setup` (the recipe's training shape, the batch,
the precision, the processes and how they shard the training state).

Its own module so that the arithmetic (arithmetic.py) and the plan (plan.py), which both read it,
import it from below rather than from each other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from recipes_lib.config.recipe_spec import LoraShape, TrainingShape
from recipes_lib.errors import ConfigError

# The CUDA context and cuBLAS workspace live outside PyTorch's allocator, so max_memory_allocated
# never shows them. This default is an assumption, not a measurement made here: on a GPU, a run's
# results.json gives device_used_gib - reserved_at_end_gib per phase (memory/monitor.py): the context and
# workspace, on a GPU no other process uses. Pass that with --cuda_overhead_gib.
DEFAULT_CUDA_OVERHEAD_GIB = 0.5

# Several processes (accelerate_configs/): the parts of the training state each process keeps only
# 1/N of (docs/multi-gpu.md); activations belong to each process's own batch, so they never divide.
# Sharded weights add the layer each process gathers to compute (gathered_layer_bytes). The split
# follows this planner's layout (fp32 weights and gradients, as the Trainer keeps them); DeepSpeed's
# bf16 mode keeps bf16 weights and gradients and an fp32 master copy in the optimizer state: the same
# bytes, split differently.
SHARDED_PARTS: dict[str, tuple[str, ...]] = {
    "none": (),  # DDP (multi_gpu.yaml): every process holds everything
    "zero1": ("optimizer_state",),
    "zero2": ("optimizer_state", "gradients"),  # deepspeed_zero2.yaml
    # FSDP SHARD_GRAD_OP gathers the weights in full from forward to the end of backward: all at the peak.
    "fsdp_shard_grad_op": ("optimizer_state", "gradients"),
    "zero3": ("optimizer_state", "gradients", "weights"),  # deepspeed_zero3.yaml
    "fsdp_full_shard": ("optimizer_state", "gradients", "weights"),  # fsdp.yaml
}


@dataclass(frozen=True)
class Setup:
    """How the model trains: what changes the memory besides the model itself."""

    # What the recipe changes (adapters, a 4-bit base, 8-bit optimizer state): all the arithmetic reads.
    shape: TrainingShape = TrainingShape()
    # The recipe's name, or any words: shown in reports, never read by the arithmetic.
    label: str = ""
    batch_size: int = 32
    seq_length: int = 128
    # The run's mixed precision: bf16 or fp16 autocast (both false: fp32). The two cost the same bytes
    # (2 per autocast copy; DeepSpeed's bf16 and fp16 modes both cast the model), so the arithmetic
    # reads only `half_precision`; the name shows in the reports.
    bf16: bool = False
    fp16: bool = False
    # Why this precision, in words ("what the recipe picks on ..."): shown in reports, never read by the arithmetic.
    precision_reason: str = ""
    gradient_checkpointing: bool = False
    device: str = "cuda"  # "cuda" or "cpu": their attention kernels and dropout masks differ
    # The kernel asked for: "flash_attention_2", "sdpa" or "eager"; a family without it runs the next
    # one it has (arithmetic.attention_kernel).
    attention: str = "sdpa"
    # Padded batches give the fused attention kernel a mask, which it makes float per layer.
    padded: bool = True
    # Above 1, gradients stay from one micro-batch to the next, so they meet the activations.
    gradient_accumulation_steps: int = 1
    cuda_overhead_gib: float = DEFAULT_CUDA_OVERHEAD_GIB
    # Processes training together and how they shard the training state (SHARDED_PARTS).
    num_processes: int = 1
    sharding: str = "none"
    # DeepSpeed ZeRO-Offload (accelerate_configs/deepspeed_zero2_offload.yaml): optimizer state,
    # fp32 master weights and gradients in CPU memory. CUDA only.
    optimizer_offload: bool = False

    def __post_init__(self):
        if self.bf16 and self.fp16:
            raise ConfigError(
                "A Setup with both bf16 and fp16: a run computes in one precision; set one of them."
            )

    @property
    def precision(self) -> str:
        return "bf16" if self.bf16 else "fp16" if self.fp16 else "fp32"

    @property
    def half_precision(self) -> bool:
        """Under bf16 or fp16 autocast: each matmul keeps 2-byte copies of its inputs and weight."""
        return self.bf16 or self.fp16

    def with_precision(self, precision: str, reason: str = "") -> Setup:
        """A copy planned in `precision` ('fp32', 'bf16' or 'fp16'), with why, for the reports."""
        return replace(self, bf16=precision == "bf16", fp16=precision == "fp16", precision_reason=reason)

    @property
    def sharded_parts(self) -> tuple[str, ...]:
        return SHARDED_PARTS[self.sharding] if self.num_processes > 1 else ()

    @property
    def adapters(self) -> LoraShape | None:
        return self.shape.adapters


def setup_for_run(arguments, shape: TrainingShape, device: str) -> Setup:
    """The planner's view of a parsed run (its ParsedArguments): the recipe's training shape and the
    run's own batch, sequence length, precision flags, checkpointing and attention kernel."""
    training = arguments.training
    return Setup(
        shape=shape,
        batch_size=training.per_device_train_batch_size,
        seq_length=arguments.data.max_seq_length,
        bf16=bool(training.bf16),
        fp16=bool(training.fp16),  # the same bytes as bf16 (2 per autocast copy)
        # transformers 5 renamed gradient_checkpointing (a deprecated alias until v6).
        gradient_checkpointing=bool(training.activation_checkpointing),
        device="cuda" if device == "cuda" else "cpu",
        # The kernel check_model_support resolves (flash_attention_2 on a GPU with flash-attn).
        attention=arguments.model.attn_implementation
        if arguments.model.attn_implementation in ("eager", "flash_attention_2")
        else "sdpa",
    )
