"""The memory planner on every encoder family: exact parameter, gradient and optimizer-state bytes
from the meta device, and activations and the peak within 10% of a measured training step on CPU.

The tiny models are the ones tests/test_families.py uses (tests/helpers/models.py) (2 layers, hidden 32, each family's own
config names and dropouts, saved as its base model: the head and, for DeBERTa, the pooler start
new, as they do from a Hub checkpoint). A training step is measured the way MemoryMonitor measures
a recipe's (memory.TensorMemoryTracker on the step after the one that creates the optimizer
state): the model loaded by modeling.load_model, adapters added by adapters.add_lora, the Trainer's
default optimizer (fused torch AdamW) on what trains, gradient clipping. all-MiniLM-L6-v2 (from its
pip package) is measured the same way at two batch sizes. Marked slow: the recipes themselves,
every family with every recipe; two more batch shapes per family; activation checkpointing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from recipes_lib.config.recipe_spec import LoraShape, TrainingShape
from recipes_lib.units import GIB
from recipes_workbench.cli.main import main
from recipes_workbench.planner import Encoder, Setup, load_config, plan_memory
from tests.helpers.models import FAMILIES, PLANNER_VARIANTS, build_tiny_family, measured_training_step
from tests.helpers.runs import INTO_SECOND_EPOCH, QUICK, run_args, run_in_process

# One CPU thread: tiny models run ~15x faster without OpenMP threads competing for the shared cores.
pytestmark = pytest.mark.usefixtures("one_thread")
TOLERANCE = 0.10
EXACT_PARTS = ("weights", "gradients", "optimizer_state")
SHAPES = {"full_ft": TrainingShape(), "lora": TrainingShape(adapters=LoraShape())}  # "auto" targets


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("planner-families")
    return {family: build_tiny_family(family, root / family) for family in FAMILIES}


def check_plan_against_step(
    model_dir: Path, shape: TrainingShape, rows: int, length: int, checkpointing: bool = False
) -> None:
    measured = measured_training_step(model_dir, shape, rows, length, checkpointing)
    setup = Setup(
        shape=shape,
        batch_size=rows,
        seq_length=length,
        padded=True,
        device="cpu",
        gradient_checkpointing=checkpointing,
    )
    plan = plan_memory(load_config(str(model_dir)), setup)
    assert plan.params_trainable == measured["trainable"]
    for part in EXACT_PARTS:
        assert getattr(plan, part) == measured[part], (part, getattr(plan, part), measured[part])
    ratios = {
        "activations": plan.activations / measured["activations"],
        "peak": plan.peak_tensors / measured["peak"],
    }
    assert all(abs(ratio - 1) <= TOLERANCE for ratio in ratios.values()), (ratios, plan.activation_terms)


@pytest.mark.parametrize("recipe", list(SHAPES))
@pytest.mark.parametrize("family", FAMILIES)
def test_the_plan_of_every_family_matches_a_measured_training_step(family, recipe, family_dirs):
    check_plan_against_step(family_dirs[family], SHAPES[recipe], rows=8, length=32)


@pytest.mark.parametrize("rows", [4, 16])
def test_the_plan_of_minilm_matches_a_measured_training_step_at_two_batch_sizes(rows, minilm_dir):
    check_plan_against_step(minilm_dir, SHAPES["full_ft"], rows=rows, length=64)


@pytest.mark.slow
@pytest.mark.parametrize("rows, length", [(4, 64), (16, 16)])
@pytest.mark.parametrize("recipe", list(SHAPES))
@pytest.mark.parametrize("family", FAMILIES)
def test_the_plan_of_every_family_matches_at_other_batch_shapes(family, recipe, rows, length, family_dirs):
    check_plan_against_step(family_dirs[family], SHAPES[recipe], rows=rows, length=length)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", list(SHAPES))
@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in ("albert", "mpnet")])
def test_the_plan_with_activation_checkpointing_matches_a_measured_training_step(family, recipe, family_dirs):
    check_plan_against_step(family_dirs[family], SHAPES[recipe], rows=8, length=32, checkpointing=True)


# The long-context families at long sequences: batch 1, the attention's S x S terms (each layer's
# float mask kept by SDPA, the bool masks made once per forward) against the linear ones. ModernBERT
# as the tiny config has it (2 layers, global attention in every other) and with 6 (every third, as
# published): with 2 layers its highest moment is building the sliding-window mask (an int64 S x S
# distance), before any layer keeps anything (benchmarks/long_context.py measures both).
LONG_CONTEXT = {
    "eurobert": ("eurobert", {}),
    "gte": ("gte", {}),
    "nomic_bert": ("nomic_bert", {}),
    "modernbert": ("modernbert", {}),
    "modernbert-6": ("modernbert", {"num_hidden_layers": 6, "global_attn_every_n_layers": 3}),
}


@pytest.fixture(scope="module")
def long_context_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("planner-long")
    return {
        name: build_tiny_family(family, root / name, max_position_embeddings=8192, **extra)
        for name, (family, extra) in LONG_CONTEXT.items()
    }


@pytest.mark.parametrize("length", [512, 2048, pytest.param(8192, marks=pytest.mark.slow)])
@pytest.mark.parametrize("family", list(LONG_CONTEXT))
def test_the_plan_of_the_long_context_families_matches_a_measured_step_at_long_sequences(
    family, length, long_context_dirs
):
    """8,192 tokens: ~1 GB and ~20 s a family on one CPU thread (slow)."""
    check_plan_against_step(long_context_dirs[family], SHAPES["full_ft"], rows=1, length=length)


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("family", ["modernbert", "modernbert-6"])
def test_the_plan_of_modernbert_holds_its_masks_at_a_batch_of_long_rows(
    family, checkpointing, long_context_dirs
):
    """4 x 2,048: the bool masks (B x S x S each) and the float ones (every layer's, or under checkpointing the
    recomputed layer's) outweigh building the sliding-window mask (16 B x S x S, whatever the batch)."""
    check_plan_against_step(
        long_context_dirs[family], SHAPES["full_ft"], rows=4, length=2048, checkpointing=checkpointing
    )


@pytest.fixture(scope="module")
def variant_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("planner-variants")
    return {
        name: build_tiny_family(model_type, root / name, **extra)
        for name, (model_type, extra) in PLANNER_VARIANTS.items()
    }


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("recipe", list(SHAPES))
@pytest.mark.parametrize("variant", list(PLANNER_VARIANTS))
def test_the_plan_of_each_config_variant_matches_a_measured_training_step(
    variant, recipe, checkpointing, variant_dirs
):
    """DeBERTa-v2 xlarge/xxlarge's ConvLayer (conv_kernel_size 3): its weights, and what it keeps
    beside the first layer (the convolution's input, masks, GELU's input, its LayerNorm's)."""
    check_plan_against_step(
        variant_dirs[variant], SHAPES[recipe], rows=8, length=32, checkpointing=checkpointing
    )


def test_the_encoder_finds_deberta_v2s_conv_layer(variant_dirs, family_dirs):
    conv = Encoder.from_config(load_config(str(variant_dirs["deberta-v2-conv"])))
    assert conv.conv_weights == 32 * 32 * 3  # hidden x hidden x kernel
    assert Encoder.from_config(load_config(str(family_dirs["deberta-v2"]))).conv_weights == 0


@pytest.mark.parametrize("family", ["albert", "mpnet"])
def test_activation_checkpointing_is_refused_for_the_families_without_it(family, family_dirs):
    from recipes_lib.errors import ModelError

    with pytest.raises(ModelError, match="do not support activation checkpointing"):
        plan_memory(load_config(str(family_dirs[family])), Setup(gradient_checkpointing=True))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["full_ft", "adamw_8bit", "lora", "qlora"])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_planner_predicts_every_recipe_run_on_every_family(
    family, recipe, family_dirs, learnable_data, tmp_path
):
    """The recipes themselves, in this process, each with its own length grouping, into the second
    epoch (INTO_SECOND_EPOCH): planned for the batch of the peak."""
    from recipes_workbench.recipes import RECIPES

    model_dir = family_dirs[family]
    results = run_in_process(
        recipe, run_args(model_dir, learnable_data, tmp_path / "run", *INTO_SECOND_EPOCH, **QUICK)
    )
    batch = results["memory_peak_batch"]
    setup = Setup(
        shape=RECIPES[recipe].default_shape(),
        batch_size=batch["rows"],
        seq_length=batch["length"],
        padded=batch["padded"],
        device="cpu",
    )
    plan = plan_memory(load_config(str(model_dir), num_labels=results["num_labels"]), setup)
    assert plan.params_trainable == results["params_trainable"]
    for part in ("weights", "gradients", "optimizer_state", "activations"):
        measured = results["memory_breakdown_gib"][part] * GIB
        assert getattr(plan, part) == pytest.approx(measured, rel=TOLERANCE), (part, plan.activation_terms)
    assert plan.peak_tensors == pytest.approx(results["tensor_peak_gib"] * GIB, rel=TOLERANCE)


def test_the_encoder_reads_each_family_under_its_own_names(family_dirs):
    """Sizes from the config and the meta model, whatever the family calls them."""
    from recipes_workbench.planner.forwards import FORWARDS

    configs = {family: load_config(str(family_dirs[family])) for family in FAMILIES}
    encoders = {family: Encoder.from_config(config) for family, config in configs.items()}
    # What no config or module says comes from the family's row in the planner's table.
    assert all(encoders[name].family == FORWARDS[name] for name in FAMILIES if name != "ernie")
    # ERNIE 3.0's use_task_id (set in its tiny config) adds one index tensor to its row.
    assert encoders["ernie"].family == replace(FORWARDS["ernie"], embedding_indices=1)
    assert {(e.hidden, e.layers, e.heads, e.intermediate) for e in encoders.values()} == {(32, 2, 2, 64)}
    assert encoders["distilbert"].family.hidden_dropouts == 1  # dropout after the FFN only
    assert encoders["xlm-roberta-xl"].family.layer == "pre-norm"  # LayerNorm before attention and FFN
    assert encoders["albert"].embedding == encoders["electra"].embedding == 16  # projected up
    assert encoders["ernie"].family.embedding_indices == 1  # ERNIE 3.0's task type ids (use_task_id)
    assert encoders["albert"].activation_keeps == 4  # gelu_new, written as ops: x, tanh, 1 + tanh, x / 2
    assert encoders["bert"].activation_keeps == 1  # GELU keeps its input
    assert encoders["modernbert"].gated_ffn and encoders["modernbert"].sliding_layers == 1
    # activation(gate_proj) x up_proj: F is gate_proj's width
    assert all(encoders[name].gated_ffn for name in ("eurobert", "gte", "nomic_bert"))
    assert not encoders["bert"].gated_ffn
    assert not encoders["deberta"].sdpa and not encoders["mpnet"].sdpa and encoders["bert"].sdpa
    v1, v2 = encoders["deberta"].relative, encoders["deberta-v2"].relative
    assert v1.separate_projections and v1.span(32) == 32 and v1.span(256) == 130  # min(S, max positions)
    assert not v2.separate_projections and v2.span(32) == v2.span(256) == 32  # the position buckets
    # The adapters each family gets by default ("auto"), found on the meta model.
    adapted = {
        family: sorted(a.name.rsplit(".", 1)[-1] for a in Encoder.from_config(
            load_config(str(family_dirs[family])), LoraShape()
        ).adapters)
        for family in ("bert", "distilbert", "deberta", "deberta-v2", "modernbert", "mpnet", "eurobert", "gte")
    }  # fmt: skip
    assert adapted == {
        "bert": ["query", "value"],
        "distilbert": ["q_lin", "v_lin"],
        "deberta": ["in_proj"],
        "deberta-v2": ["query_proj", "value_proj"],
        "modernbert": ["Wqkv"],
        "mpnet": ["q", "v"],
        "eurobert": ["q_proj", "v_proj"],
        "gte": ["q_proj", "v_proj"],
    }


def test_the_pooler_a_gte_base_checkpoint_lacks_trains_in_full_under_lora(family_dirs):
    """GteModel and NomicBertModel build no pooler unless asked, so a base checkpoint has none: the
    classifier's pooler starts new and LoRA trains it in full, as load_model's report says."""
    from recipes_lib.modeling.families import meta_model
    from recipes_workbench.planner.parameters import modules_the_checkpoint_lacks

    for family, prefix in (("gte", "gte"), ("nomic_bert", "nomic_bert"), ("bert", None)):
        config = load_config(str(family_dirs[family]))
        lacking = modules_the_checkpoint_lacks(config, meta_model(config))
        assert (f"{prefix}.pooler.dense" in lacking) == (prefix is not None), (family, lacking)
        assert "classifier" in lacking


def test_every_family_entry_has_one_row_in_the_planners_table_and_every_row_an_entry():
    """What a family's forward keeps is the planner's (recipes_workbench/planner/forwards.py), keyed by the family's
    own model_type: a new entry without its row, or a row left after its entry, fails here."""
    from recipes_lib.config.family_registry import FAMILIES as ENTRIES
    from recipes_workbench.planner.forwards import FORWARDS

    assert sorted(FORWARDS) == sorted(family.model_type for family in ENTRIES)


def test_camembert_is_planned_as_roberta_whose_entry_lists_it():
    """CamemBERT is RoBERTa's architecture under its own model_type: the same plan at the same sizes."""
    from transformers import AutoConfig

    from tests.helpers.models import SMALL

    sizes = dict(vocab_size=64, max_position_embeddings=130, pad_token_id=1, **SMALL)
    setup = Setup(shape=SHAPES["lora"], device="cpu", batch_size=8, seq_length=32)
    roberta, camembert = (
        plan_memory(AutoConfig.for_model(model_type, **sizes), setup)
        for model_type in ("roberta", "camembert")
    )
    assert camembert.activation_terms == roberta.activation_terms
    assert camembert.params_trainable == roberta.params_trainable


def test_a_config_of_an_unknown_family_without_bert_names_is_refused():
    from transformers import GPT2Config

    from recipes_lib.errors import ModelError

    with pytest.raises(
        ModelError, match="encoder families: bert, roberta.*gpt2 config has no intermediate_size"
    ):
        plan_memory(GPT2Config(n_layer=2, n_embd=32, n_head=2), Setup())


def table_rows(output: str) -> list[list[str]]:
    """The plan table's rows: model, recipe, figures, fits, max batch."""
    recipes = {"full_ft", "adamw_8bit", "lora", "qlora"}
    return [
        line.split() for line in output.splitlines() if len(line.split()) > 2 and line.split()[1] in recipes
    ]


def test_plan_all_recipes_plans_every_family_and_says_why_a_row_cannot_be(family_dirs, capsys):
    models = [str(family_dirs[family]) for family in FAMILIES]
    argv = ["plan", "--model", *models, "--recipe", "all", "--no_family", "--device", "cpu",
            "--per_device_train_batch_size", "8", "--max_seq_length", "32", "--budget_gib", "1"]  # fmt: skip
    assert main(argv) == 0
    rows = table_rows(capsys.readouterr().out)
    assert len(rows) == 4 * len(FAMILIES) and all(row[-2] == "yes" for row in rows), rows

    # Adapters named the BERT way: the families that call their projections otherwise say so, per row.
    assert main([*argv, "--lora_target_modules", "query", "value"]) == 2
    output = capsys.readouterr().out
    reasons = {line.split(", ")[0]: line for line in output.splitlines() if ": not planned: " in line}
    refusing = {"distilbert", "deberta", "deberta-v2", "modernbert", "mpnet", "eurobert", "gte", "nomic_bert"}
    assert set(reasons) == {str(family_dirs[family]) for family in refusing}
    for family in refusing:
        assert (
            "lora, qlora: not planned: lora_target_modules ('query', 'value') names no layer"
            in reasons[str(family_dirs[family])]
        )
    rows = table_rows(output)
    assert len(rows) == 4 * len(FAMILIES)
    assert sum(row[-2] == "yes" for row in rows) == 4 * len(FAMILIES) - 2 * len(refusing)
