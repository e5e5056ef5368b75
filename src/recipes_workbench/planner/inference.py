"""The plan of a no-grad forward: distillation's teacher pass, which runs and is freed before the
student loads, so the run's peak is the larger of the two plans (docs/memory.md, "Distillation: the
teacher pass and the student").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.errors import ConfigError
from recipes_lib.results import RESULTS_FILE, read_results
from recipes_lib.units import GIB
from recipes_workbench.planner.arithmetic import inference_activation_terms, input_bytes, weight_bytes
from recipes_workbench.planner.configs import load_config_and_source
from recipes_workbench.planner.encoder import Encoder
from recipes_workbench.planner.parameters import count_parameters_on_meta
from recipes_workbench.planner.setup import Setup

ADAPTER_CONFIG_FILE = "adapter_config.json"


@dataclass
class InferencePlan:
    """One model's no-grad forward at one batch: its parts in bytes and the predicted peak."""

    model: str
    setup: Setup  # the batch, length, precision and device of the pass; its shape: how the weights load
    params_total: int
    weights: int
    activations: int
    other: int  # the input batch
    activation_terms: dict[str, int]

    @property
    def cuda_overhead(self) -> int:
        return int(self.setup.cuda_overhead_gib * GIB) if self.setup.device == "cuda" else 0

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.other + self.cuda_overhead


def plan_inference(config, setup: Setup, model_name: str = "") -> InferencePlan:
    """The plan of `config`'s no-grad forward at setup's batch and length (setup.shape: how its
    weights are stored; no adapters' activations, no gradients, no optimizer state)."""
    encoder = Encoder.from_config(config, None)
    parameters = count_parameters_on_meta(config, setup.shape)
    terms = inference_activation_terms(encoder, setup)
    return InferencePlan(
        model=model_name or getattr(config, "_name_or_path", "") or encoder.model_type,
        setup=setup,
        params_total=parameters.total,
        weights=weight_bytes(parameters, setup),
        activations=sum(terms.values()),
        other=input_bytes(setup, encoder) - 8 * setup.batch_size,  # no labels
        activation_terms=terms,
    )


@dataclass
class Teacher:
    """A teacher as the planner sees it: its config, how its weights load, and where they came from."""

    config: object
    shape: TrainingShape
    source: str
    # The teacher reads at its own run's max_seq_length (distillation.py); None: the plan's.
    seq_length: int | None = None


def load_teacher(teacher: str, num_labels: int, shapes: dict[str, TrainingShape]) -> Teacher:
    """The teacher of `plan --recipe distill --teacher`: a finished run's output_dir (its config.json,
    or an adapter's base; a QLoRA run's 4-bit base, by the recipe its results.json names, looked up in
    `shapes`; its max_seq_length) or any model `plan --model` takes (loaded in fp32, as a full model is)."""
    path = Path(teacher)
    if (path / RESULTS_FILE).is_file():
        results = read_results(path)
        recipe = results.recipe
        # The teacher runs as it was evaluated: a QLoRA adapter on its 4-bit base, which stays 4-bit.
        # An adapter's own weights (well under 1% of a layer's) are left out.
        shape = replace(shapes.get(recipe, TrainingShape()), adapters=None)
        if (path / "config.json").is_file():
            config, _ = load_config_and_source(str(path), num_labels)
        elif (path / ADAPTER_CONFIG_FILE).is_file():
            base = json.loads((path / ADAPTER_CONFIG_FILE).read_text()).get("base_model_name_or_path")
            config, _ = load_config_and_source(str(base), num_labels)
        else:
            raise ConfigError(
                f"--teacher '{teacher}' holds {RESULTS_FILE} but neither config.json nor {ADAPTER_CONFIG_FILE}; "
                "pass the output_dir of a finished run, or a model name."
            )
        seq_length = (results.config or {}).get("max_seq_length")
        return Teacher(config, shape, f"the {recipe or 'unknown'} run in {teacher}", seq_length)
    config, source = load_config_and_source(teacher, num_labels)
    return Teacher(config, TrainingShape(), source)
