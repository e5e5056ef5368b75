"""What a recipe script declares about itself, as data (`RecipeSpec`), the adapters a LoRA recipe adds
(`LoraShape`) and what a recipe trains as the memory planner reads it (`TrainingShape`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def option(default: Any, help: str, **metadata: Any) -> Any:
    """A dataclass field for HfArgumentParser: `--help` prints `help`; `choices` limits the values."""
    return field(default=default, metadata={"help": help, **metadata})


@dataclass(frozen=True)
class LoraShape:
    """The adapters a LoRA recipe adds: rank, which linear layers, dropout on their input."""

    r: int = 8
    alpha: float = 16  # the update is scaled by alpha / r
    # Layer names; "all-linear" for every linear layer except the classification head; "auto" for the
    # family's attention query and value projections (families.default_lora_targets).
    target_modules: tuple[str, ...] | str = "auto"
    dropout: float = 0.1
    train_pooler: bool = False


@dataclass(frozen=True)
class TrainingShape:
    """What a recipe changes that decides its memory."""

    adapters: LoraShape | None = None  # None: every weight trains (full fine-tuning)
    quantized_base: bool = False  # the encoder's linear weights stored quantized (bitsandbytes)
    base_bits: int = 4  # with quantized_base: 4 (NF4, QLoRA) or 8 (LLM.int8); read only then
    optimizer_bits: int = 32  # AdamW state per element of a weight matrix: 32-bit, or 8-bit blocks
    embedding_optimizer_bits: int = 32  # the same for nn.Embedding weights
    # bitsandbytes' paged optimizer: the state of tensors of 100,000 elements or more lives in CUDA
    # unified memory, which the driver evicts to CPU memory when the GPU runs short (recipes_workbench/planner/plan.py).
    paged_optimizer: bool = False


@dataclass(frozen=True)
class RecipeSpec:
    name: str  # also the script's name: recipes/<name>.py
    summary: str = ""  # what trains, in a few words
    # The recipe's own argument dataclass (LoraArguments, say), parsed like the shared ones.
    options: type | None = None
    # The defaults the recipe sets, e.g. LoRA's learning rate; above the dataclasses' own, below the
    # YAML file and the command line.
    training_defaults: Mapping[str, Any] = field(default_factory=dict)
