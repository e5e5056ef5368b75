"""Every BERT-sized encoder family in every recipe, on tiny random configs built here (families.py).

Each family's model is built from its config (2 layers, hidden 32) and saved as its base model, the
way a pretrained checkpoint is published: the classification head (and DeBERTa's pooler,
DistilBERT's pre_classifier) are not in it and start random. All share one WordPiece vocabulary
of the test words. LoRA runs for every family by default; the other recipes are marked slow.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch

from recipes_lib.errors import RecipeError
from tests.helpers.models import FAMILIES, FAMILY_SHAPES, build_tiny_family, logits
from tests.helpers.runs import QUICK, run_args, run_in_process


@pytest.fixture(scope="module")
def family_models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {family: build_tiny_family(family, root / family) for family in FAMILIES}


def run_capturing_the_evaluated_model(recipe: str, args: list[str]):
    """Run the recipe in this process; return its results and the model it evaluated."""
    from recipes_lib.run import RecipeRun

    evaluated = {}
    original = RecipeRun.write_results

    def write_results(run, trainer, *args):
        evaluated["model"] = trainer.model
        return original(run, trainer, *args)

    with mock.patch.object(RecipeRun, "write_results", write_results):
        results = run_in_process(recipe, args)
    return results, evaluated["model"]


def few_steps(model_dir: Path, data, output_dir: Path, *extra: str) -> list[str]:
    return run_args(
        model_dir, data, output_dir, "--max_steps", "3", "--learning_rate", "5e-3", *extra, **QUICK
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_trains_saves_reloads_and_merges_to_the_evaluated_logits(
    family, family_models, learnable_data, tmp_path
):
    from transformers import AutoModelForSequenceClassification

    from recipes_lib.modeling.adapters import MERGED_SUBDIR, load_trained_model
    from recipes_lib.modeling.families import profile_for

    output_dir = tmp_path / "run"
    args = few_steps(family_models[family], learnable_data, output_dir, "--merge_adapter", "true")
    results, evaluated = run_capturing_the_evaluated_model("lora", args)
    profile = profile_for(evaluated.config)
    assert results["lora_target_modules"] == list(profile.lora_targets)
    assert results["attn_implementation"] == profile.default_attention
    expected = logits(evaluated, output_dir)
    reloaded = load_trained_model(output_dir)
    merged = AutoModelForSequenceClassification.from_pretrained(output_dir / MERGED_SUBDIR)
    torch.testing.assert_close(logits(reloaded, output_dir), expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(logits(merged, output_dir), expected, atol=1e-4, rtol=0)
    # Everything the checkpoint lacked trained and was saved with the adapter.
    assert "classifier" in " ".join(results["modules_trained_in_full"])
    # In one order whatever the hash seed (peft keeps them in a set): two runs of one config write one list.
    assert results["modules_trained_in_full"] == sorted(results["modules_trained_in_full"])
    if family.startswith("deberta"):
        assert any("pooler" in name for name in results["modules_trained_in_full"])


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["full_ft", "adamw_8bit", "qlora"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_recipe_trains_every_family(recipe, family, family_models, learnable_data, tmp_path):
    from recipes_lib.modeling.adapters import load_trained_model

    output_dir = tmp_path / "run"
    results, evaluated = run_capturing_the_evaluated_model(
        recipe, few_steps(family_models[family], learnable_data, output_dir)
    )
    assert results["train_steps"] == 3 and results["eval_accuracy"] is not None
    # QLoRA too: the reload rebuilds the 4-bit base it was evaluated on.
    reloaded = logits(load_trained_model(output_dir), output_dir)
    torch.testing.assert_close(reloaded, logits(evaluated, output_dir), atol=1e-4, rtol=0)


def too_late(*args, **kwargs):
    raise AssertionError("this error should come before tokenization and before the weights load")


def stop_before_work(monkeypatch):
    """Any call that tokenizes, loads the data or loads the model weights fails the test."""
    from recipes_lib.modeling import loading
    from recipes_lib.run import preparation

    monkeypatch.setattr(preparation, "tokenize", too_late)
    monkeypatch.setattr(preparation, "load_classification_data", too_late)
    monkeypatch.setattr(loading.AutoModelForSequenceClassification, "from_pretrained", too_late)


@pytest.mark.parametrize(
    "family, recipe, extra, expected",
    [
        (
            "deberta-v2",
            "full_ft",
            ["--attn_implementation", "sdpa"],
            "attn_implementation 'sdpa' is not supported by DeBERTa-v2/v3 .* supports: eager",
        ),
        ("mpnet", "lora", ["--attn_implementation", "sdpa"], "not supported by MPNet"),
        (
            "distilbert",
            "lora",
            ["--lora_target_modules", "query", "value"],
            "names query, value, which this distilbert model has no linear layer called. Its linear layers are called: .*q_lin",
        ),
        ("modernbert", "qlora", ["--lora_target_modules", "q_proj"], "Its linear layers are called: .*Wqkv"),
        (
            "roberta",
            "full_ft",
            ["--max_seq_length", "130"],
            "max_seq_length 130 is longer than this model accepts: 129 tokens .*less 1 below",
        ),
    ],
)
def test_bad_choices_for_a_family_stop_before_data_and_weights_load(
    family, recipe, extra, expected, family_models, learnable_data, tmp_path, monkeypatch
):
    stop_before_work(monkeypatch)
    output_dir = tmp_path / "run"
    with pytest.raises(RecipeError, match=expected):
        run_in_process(recipe, run_args(family_models[family], learnable_data, output_dir, *extra, **QUICK))
    assert not output_dir.exists()


def test_a_non_default_attention_kernel_runs_and_is_reported(family_models, learnable_data, tmp_path):
    args = few_steps(
        family_models["bert"], learnable_data, tmp_path / "run", "--attn_implementation", "eager"
    )
    results, evaluated = run_capturing_the_evaluated_model("full_ft", args)
    assert results["attn_implementation"] == "eager" == evaluated.config._attn_implementation


def test_roberta_accepts_its_full_length(family_models, learnable_data, tmp_path):
    results = run_in_process(
        "full_ft",
        few_steps(family_models["roberta"], learnable_data, tmp_path / "run", "--max_seq_length", "129"),
    )
    assert results["train_steps"] == 3


@pytest.mark.parametrize("family", ["roberta", "camembert", "xlm-roberta", "mpnet"])
def test_roberta_style_positions_leave_512_of_514(family):
    from transformers import AutoConfig

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.errors import ModelError
    from recipes_lib.modeling.loading import check_model_support

    config = AutoConfig.for_model(family, max_position_embeddings=514, pad_token_id=1)  # roberta-base's
    check_model_support(ModelArguments(), config, 512)
    with pytest.raises(ModelError, match="Use --max_seq_length 512 or less"):
        check_model_support(ModelArguments(), config, 513)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_a_profile_with_lora_targets_that_exist(family):
    from transformers import AutoConfig

    from recipes_lib.modeling.adapters import linear_layer_names
    from recipes_lib.modeling.families import meta_model, profile_for

    config = AutoConfig.for_model(family)
    profile = profile_for(config)
    assert profile.lora_targets and set(profile.lora_targets) <= set(linear_layer_names(meta_model(config)))
    assert profile.layer_classes and profile.layer_modules
    assert "eager" in profile.attention_implementations


def test_every_model_type_in_the_registry_is_one_familys_and_has_lora_targets_that_exist():
    """peft's targets, or the entry's where peft has none (CamemBERT under RoBERTa's entry)."""
    from transformers import AutoConfig

    from recipes_lib.config.family_registry import FAMILIES
    from recipes_lib.modeling.adapters import linear_layer_names
    from recipes_lib.modeling.families import default_lora_targets, meta_model

    model_types = [model_type for family in FAMILIES for model_type in family.model_types]
    assert len(model_types) == len(set(model_types))  # a model type in two entries would be ambiguous
    for model_type in model_types:
        targets, _ = default_lora_targets(model_type)
        linears = linear_layer_names(meta_model(AutoConfig.for_model(model_type, num_hidden_layers=1)))
        assert targets and set(targets) <= set(linears), model_type


def test_automatic_precision_keeps_the_families_whose_entries_say_fp16_overflows_in_fp32():
    from recipes_lib.config.precision import FP16_UNSAFE_MODEL_TYPES, DeviceCapability, choose_precision

    assert {"deberta", "deberta-v2"} == FP16_UNSAFE_MODEL_TYPES
    old_gpu = DeviceCapability("cuda", "T4", native_bf16=False, native_fp16=True)
    choices = {
        model_type: choose_precision(old_gpu, bf16=None, fp16=None, launcher=None, model_type=model_type)
        for model_type in ("deberta-v2", "bert")
    }
    assert choices["deberta-v2"].precision == "fp32" and choices["bert"].precision == "fp16"


def test_a_sentencepiece_tokenizer_without_its_package_is_a_clear_error_before_data_loads(
    family_models, learnable_data, tmp_path, monkeypatch
):
    """DeBERTa-v3's tokenizer ships as spm.model; without sentencepiece transformers blames tiktoken."""
    import json
    import shutil
    import sys

    import sentencepiece

    text = tmp_path / "text.txt"
    text.write_text(
        "\n".join(["the red cat sat on a table", "a blue dog ran quickly", "green purple yellow"] * 50)
    )
    sentencepiece.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / "spm"), vocab_size=30, minloglevel=2,
        user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
    )  # fmt: skip
    tokenizer_dir = tmp_path / "deberta-v3-tokenizer"
    tokenizer_dir.mkdir()
    shutil.copy(tmp_path / "spm.model", tokenizer_dir / "spm.model")
    (tokenizer_dir / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "DebertaV2Tokenizer"})
    )
    stop_before_work(monkeypatch)
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # as if it were not installed
    argv = run_args(
        family_models["deberta-v2"],
        learnable_data,
        tmp_path / "run",
        "--tokenizer_name",
        str(tokenizer_dir),
        **QUICK,
    )
    with pytest.raises(
        RecipeError, match="needs sentencepiece, which is not installed: pip install sentencepiece"
    ):
        run_in_process("full_ft", argv)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_head_trains_multi_label_with_bce_and_regression_with_mse(family, tmp_path):
    """The heads take the loss from config.problem_type, which modeling.load_model_config sets from the labels:
    without it DeBERTa-v2's head trains multi-label rows with a softmax cross-entropy over the classes."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.data.labels import LabelMapping
    from recipes_lib.modeling.loading import load_model_config

    functional = torch.nn.functional
    ids = torch.randint(5, 60, (2, 7), generator=torch.Generator().manual_seed(0))
    AutoConfig.for_model(
        family, vocab_size=64, max_position_embeddings=130, pad_token_id=0, **FAMILY_SHAPES[family]
    ).save_pretrained(tmp_path)
    for problem_type, names, labels in (
        ("multi_label_classification", ["a", "b", "c"], torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])),
        ("regression", ["score"], torch.tensor([0.3, 0.9])),
    ):
        mapping = LabelMapping(names=names, to_id={}, problem_type=problem_type)
        config = load_model_config(ModelArguments(model_name_or_path=str(tmp_path)), mapping)
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_config(config).eval()
        output = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
        if problem_type == "regression":
            expected = functional.mse_loss(output.logits.squeeze(-1), labels)
        else:
            expected = functional.binary_cross_entropy_with_logits(output.logits, labels)
        assert float(output.loss) == pytest.approx(float(expected), rel=1e-5)


# --- a model outside the registry: GPT-2, a decoder ----------------------------------------------------


def test_a_model_type_outside_the_registry_is_let_through_with_one_warning(caplog):
    from transformers import AutoConfig, GPT2Config

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.modeling.loading import check_model_support

    with caplog.at_level("WARNING", logger="recipes_lib"):
        check_model_support(ModelArguments(model_name_or_path="tiny-gpt2"), GPT2Config(n_layer=1), 128)
    (warning,) = [record for record in caplog.records if record.levelname == "WARNING"]
    message = warning.getMessage()
    assert "model_type 'gpt2' (tiny-gpt2)" in message and "untested" in message
    assert "`recipes-lib families`" in message and "LoRA on c_attn" in message
    caplog.clear()
    with caplog.at_level("WARNING", logger="recipes_lib"):
        check_model_support(ModelArguments(), AutoConfig.for_model("bert", num_hidden_layers=1), 128)
    assert not caplog.records  # a registry family: nothing to say


def test_a_tokenizer_without_a_padding_token_pads_with_its_end_of_sequence_token(tmp_path, caplog):
    from transformers import AutoConfig, AutoTokenizer

    from recipes_lib.errors import ModelError
    from recipes_lib.modeling.loading import pad_with_eos_if_missing
    from tests.helpers.models import build_tiny_gpt2, word_tokenizer, word_vocabulary

    model_dir = build_tiny_gpt2(tmp_path / "gpt2")
    tokenizer, config = AutoTokenizer.from_pretrained(model_dir), AutoConfig.from_pretrained(model_dir)
    assert tokenizer.pad_token is None and config.pad_token_id is None  # as GPT-2's own
    with caplog.at_level("WARNING", logger="recipes_lib"):
        pad_with_eos_if_missing(tokenizer, config)
    assert tokenizer.pad_token == tokenizer.eos_token == "<|endoftext|>" and config.pad_token_id == 0
    (line,) = [record.getMessage() for record in caplog.records]
    assert "no padding token" in line and "'<|endoftext|>' (id 0)" in line
    # A tokenizer with a padding token (every family's) is left as it is.
    bert_tokenizer, bert_config = word_tokenizer(word_vocabulary()), AutoConfig.for_model("bert")
    pad_with_eos_if_missing(bert_tokenizer, bert_config)
    assert bert_tokenizer.pad_token == "[PAD]" and bert_config.pad_token_id == 0
    # Neither token: nothing to pad with, one paragraph naming the fix.
    bare = AutoTokenizer.from_pretrained(model_dir)
    bare.eos_token = None
    with pytest.raises(
        ModelError, match="neither a padding token nor an end-of-sequence token.*--tokenizer_name"
    ):
        pad_with_eos_if_missing(bare, AutoConfig.from_pretrained(model_dir))


def test_gpt2_fine_tunes_end_to_end_padded_with_its_end_of_sequence_token(tmp_path, learnable_data):
    """Batches of different lengths are padded (batch 8), and the head finds each row's last real token
    through the config's pad_token_id; both are saved, so the output directory predicts."""
    from transformers import AutoConfig, AutoTokenizer

    from recipes_workbench.tools.predict import predict
    from tests.helpers.models import build_tiny_gpt2

    model_dir = build_tiny_gpt2(tmp_path / "gpt2")
    output_dir = tmp_path / "run"
    results = run_in_process("full_ft", run_args(model_dir, learnable_data, output_dir, **QUICK))
    assert results["model_type"] == "gpt2" and results["eval_accuracy"] is not None
    assert AutoTokenizer.from_pretrained(output_dir).pad_token == "<|endoftext|>"
    assert AutoConfig.from_pretrained(output_dir).pad_token_id == 0
    assert len(predict(str(output_dir), str(learnable_data["validation"]))) == 64


# --- the attention kernel: FlashAttention 2 where this machine runs it ---------------------------------


def test_the_recipes_pick_flash_attention_2_where_a_gpu_with_flash_attn_runs_it(monkeypatch):
    """No GPU here: flash-attn's availability (transformers' is_flash_attn_2_available) is patched."""
    from transformers import AutoConfig

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.modeling import families, loading
    from recipes_lib.modeling.loading import check_model_support

    def picked(model_type: str) -> str:
        model_args = ModelArguments()
        return check_model_support(model_args, AutoConfig.for_model(model_type), 128)[1]

    assert picked("modernbert") == picked("bert") == "sdpa"  # this machine: no CUDA, no flash-attn
    monkeypatch.setattr(families, "flash_attention_available", lambda: True)
    monkeypatch.setattr(loading, "flash_attention_available", lambda: True)
    # Every class that declares _supports_flash_attn (transformers 5.25: ModernBERT, EuroBERT, GTE, NomicBERT,
    # BERT, RoBERTa, ...); MPNet and DeBERTa have neither FlashAttention nor SDPA.
    for model_type in ("modernbert", "eurobert", "gte", "nomic_bert", "bert", "roberta"):
        assert picked(model_type) == "flash_attention_2", model_type
    assert picked("mpnet") == picked("deberta-v2") == "eager"


def test_a_gpu_without_flash_attn_says_what_modernbert_loses_and_an_explicit_ask_is_refused(
    monkeypatch, caplog
):
    from transformers import AutoConfig

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.errors import ModelError
    from recipes_lib.modeling import loading
    from recipes_lib.modeling.loading import check_model_support

    monkeypatch.setattr(loading, "cuda_available", lambda: True)  # a GPU, flash-attn not installed
    for model_type in ("modernbert", "bert"):
        model_args = ModelArguments()
        with caplog.at_level("WARNING", logger="recipes_lib.modeling.loading"):
            _, attention = check_model_support(model_args, AutoConfig.for_model(model_type), 128)
        assert attention == "sdpa" and model_args.attn_implementation is None  # decided, not written back
    (line,) = [record.getMessage() for record in caplog.records]  # ModernBERT's; BERT loses little
    assert line.startswith("ModernBERT runs sdpa here: flash-attn is not installed")
    assert (
        "unpads ModernBERT's batches only under flash_attention_2" in line
        and "pip install flash-attn" in line
    )
    asked = ModelArguments(attn_implementation="flash_attention_2")
    with pytest.raises(ModelError, match="needs a CUDA GPU and the flash-attn package .* has no flash-attn"):
        check_model_support(asked, AutoConfig.for_model("modernbert"), 128)
    monkeypatch.setattr(loading, "cuda_available", lambda: False)
    with pytest.raises(ModelError, match="has no CUDA GPU. Leave the option out to use sdpa"):
        check_model_support(asked, AutoConfig.for_model("modernbert"), 128)


def test_a_family_newer_than_the_installed_transformers_gets_one_paragraph_naming_the_release(monkeypatch):
    """GTE's model type first shipped in transformers 5.18.0 (the GPU image's 5.17.0 has none): with the type
    missing from transformers' CONFIG_MAPPING, the recipe, the planner and `families` say which release."""
    from transformers.models.auto import configuration_auto

    from recipes_lib.config.family_registry import GTE
    from recipes_lib.errors import ModelError
    from recipes_lib.modeling.families import check_transformers_knows
    from recipes_workbench.cli.main import describe_families
    from recipes_workbench.planner.catalogue import CATALOGUE

    assert GTE.transformers_since == "5.18.0"
    check_transformers_knows("gte")  # 5.25 here: known
    mapping = configuration_auto.CONFIG_MAPPING
    monkeypatch.setattr(mapping, "_mapping", {k: v for k, v in mapping._mapping.items() if k != "gte"})
    with pytest.raises(ModelError, match=r"GTE models \(model_type 'gte'\) need transformers 5\.18\.0 or newer.*"
                       r'pip install -U "transformers>=5\.18\.0"'):  # fmt: skip
        CATALOGUE["alibaba-nlp-community/gte-multilingual-base"].config()
    header, rows = describe_families()
    assert next(row for row in rows if row[1] == "gte")[2] == "needs transformers 5.18.0"
    check_transformers_knows("bert")  # every other family as before
