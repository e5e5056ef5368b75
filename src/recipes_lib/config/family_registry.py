"""The encoder families, listed once: what transformers and peft cannot tell us about each.

What the libraries know is read from them (modeling/families.py): peft's LoRA target mapping, the
model class's attention kernels (`_supports_sdpa`), the layer class FSDP wraps (`_no_split_modules`,
else the repeated layer of the model built on the meta device) and every size in config.json.
What is left is one `Family` entry per family, here (its fields say what each holds and who reads it).

A new family is one entry in FAMILIES plus its tiny test config (tests/helpers/models.py);
`recipes-lib families`, the recipes' checks, the planner and the test matrices read FAMILIES.
Listed at the bottom layer that needs it (config/: precision.py reads `fp16_overflows`), and
importing nothing heavy, so `recipes-lib plan` reads it without loading torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

# --- what a family's forward keeps (the memory planner) ---------------------------------------------

# How a layer computes, for the planner's arithmetic (memory/planner/arithmetic.py):
POST_NORM = "post-norm"  # BERT: LayerNorm after each residual sum
PRE_NORM = "pre-norm"  # XLM-R XL: LayerNorm before attention and before the FFN, one after the last layer
DISENTANGLED = "disentangled"  # DeBERTa: post-norm, attention over content and relative positions
GATED_ROTARY = "gated-rotary"  # ModernBERT: pre-norm, gated FFN, rotary positions, sliding windows
GATED_POST_NORM = "gated-post-norm"  # GTE, NomicBERT: BERT's post-norm layer, rotary Q and K, gated FFN
RMS_GATED = "rms-gated"  # EuroBERT: Llama's layer without the causal mask (RMSNorm first, gated SiLU FFN)


@dataclass(frozen=True)
class FamilyForward:
    """What an encoder family's forward keeps for backward that neither its config nor its modules say.

    Read off transformers' modeling_<family>.py (5.x) and checked against measured training steps
    of a tiny model of every family (tests/test_planner_families.py). Everything that has a size
    comes from the config and the model built on the meta device (`Encoder.from_config`).
    """

    # Which layer arithmetic: POST_NORM, PRE_NORM, DISENTANGLED, GATED_ROTARY, GATED_POST_NORM or
    # RMS_GATED (above).
    layer: str = POST_NORM
    # The attention's query, key and value projections (a fused projection: its name three times).
    qkv: tuple[str, str, str] = ("query", "key", "value")
    # Dropouts on the T x H stream in one layer: BERT after attention and after the FFN; DistilBERT
    # only after the FFN.
    hidden_dropouts: int = 2
    # B x H tensors the pooler and the classification head keep: always, and more with dropout.
    # BERT: the pooler's tanh output, then the dropout's mask and output; RoBERTa's head drops out
    # twice, around its dense layer.
    head: tuple[int, int] = (1, 2)
    # The head's first linear reads hidden_states[:, 0], a view: when it trains, the whole last
    # T x H output stays with it (BERT's pooler, DistilBERT's pre_classifier, ModernBERT's head).
    head_reads_a_view: bool = True
    # DeBERTa v1 writes its LayerNorm as separate ops: it keeps x - mean twice and the normalized
    # output (3 T x H) and sqrt(var + eps) (T) instead of PyTorch's input, mean and rstd.
    layer_norm_ops: bool = False
    # The family's tokenizer gives token_type_ids, part of the input batch.
    token_type_ids: bool = True
    # Token-sized int64 indices the embeddings make and keep for their backward: RoBERTa numbers
    # positions from the tokens (and, given no token_type_ids, gathers token types for them).
    embedding_indices: int = 0
    # Config flags that each make the embeddings build one more token-sized int64 index tensor
    # when set (ERNIE 3.0's use_task_id: task type ids of zeros, kept by their embedding).
    index_flags: tuple[str, ...] = ()
    # MPNet: one relative position bias per forward, from an embedding of S x S bucket ids.
    relative_bias: bool = False


# --- a published checkpoint's config.json values (the planner's catalogue) --------------------------

_BERT_SIZE_NAMES = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
)


def _published(model_type: str, size_names=_BERT_SIZE_NAMES, **shared: Any) -> Callable[..., dict[str, Any]]:
    """A family's `config_values`: the five sizes under its config names, the values every
    published checkpoint of the family shares, and what one checkpoint gives besides (`extra`)."""

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


def _deberta_v2_values(
    vocab: int, hidden: int, layers: int, heads: int, ffn: int, **extra: Any
) -> dict[str, Any]:
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


# --- the families ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One encoder family: what transformers and peft cannot tell us about it (module docstring)."""

    name: str  # as tables and messages show it
    model_types: tuple[str, ...]  # the config.model_type values it covers; the first is its own
    # What its forward keeps for backward that no config or module says: the memory planner's
    # per-layer terms (memory/planner/arithmetic.py).
    forward: FamilyForward = FamilyForward()
    # The attention query and value projections (or the fused QKV one), where peft has none.
    lora_targets: tuple[str, ...] = ()
    # Embeddings that number positions from padding_idx + 1 (create_position_ids_from_input_ids): of
    # max_position_embeddings (514 for roberta-base), padding_idx + 1 are never a token's position.
    positions_after_padding: bool = False
    # Attention and relative-position scores overflow fp16's range (65,504): a NaN loss in the
    # first epochs. Automatic precision keeps the family in fp32 where bf16 is not native.
    fp16_overflows: bool = False
    # Why training fails under bf16 autocast, where it does (measured on the family's tiny model by
    # tests/test_cpu_bf16.py): automatic precision keeps the family in fp32 on a CPU with native bf16.
    bf16_autocast_fails: str | None = None
    # `config_values(vocab, hidden, layers, heads, ffn, **extra)`: a published checkpoint's
    # config.json values (model_type included), for the planner's catalogue of Hub models
    # (memory/planner/catalogue.py); None where the catalogue lists none.
    config_values: Callable[..., dict[str, Any]] | None = None
    # How `recipes-lib export` made the family's ONNX file, measured on its tiny model (exported,
    # int8 added, and passed through the gate by tests/test_export.py::
    # test_every_family_exports_and_passes_the_gate, which checks this entry): "dynamo"
    # (torch.export) or "torchscript" (the fallback). Where export fails: why, in one line.
    onnx_exporter: str = "dynamo"
    onnx_export_failure: str | None = None
    # What the family loses on a CUDA GPU without the flash-attn package, in words: a recipe there
    # says so in one line (modeling/loading.py). None: nothing worth a line.
    without_flash_attention: str | None = None
    # The first transformers release that has the family's model_type, where it is newer than the
    # oldest release the project supports (setup.cfg): an older one gets one paragraph naming it.
    transformers_since: str | None = None

    @property
    def model_type(self) -> str:
        return self.model_types[0]

    def forward_for(self, config) -> FamilyForward:
        """The family's forward for this config: with the index tensors its set flags add."""
        flagged = sum(bool(getattr(config, flag, False)) for flag in self.forward.index_flags)
        if not flagged:
            return self.forward
        return replace(self.forward, embedding_indices=self.forward.embedding_indices + flagged)


# Heads that drop out, dense, tanh, drop out, project (RobertaClassificationHead): no pooler.
_ROBERTA_HEAD = dict(head=(1, 4), head_reads_a_view=False)

BERT = Family(
    "BERT", ("bert",), config_values=_published("bert", max_position_embeddings=512, type_vocab_size=2)
)
ROBERTA = Family(
    "RoBERTa",
    # CamemBERT is RoBERTa's architecture under its own model_type (transformers copies the modules).
    ("roberta", "camembert"),
    FamilyForward(**_ROBERTA_HEAD, token_type_ids=False, embedding_indices=2),
    lora_targets=("query", "value"),  # camembert's: peft's mapping has roberta's only
    positions_after_padding=True,
    config_values=_published("roberta", **_ROBERTA_PUBLISHED),
)
XLM_ROBERTA = Family(
    "XLM-RoBERTa",
    ("xlm-roberta",),
    FamilyForward(**_ROBERTA_HEAD, token_type_ids=False, embedding_indices=2),
    positions_after_padding=True,
    config_values=_published("xlm-roberta", **_ROBERTA_PUBLISHED),
)
XLM_ROBERTA_XL = Family(
    "XLM-RoBERTa XL/XXL",
    ("xlm-roberta-xl",),
    # XLM-R's embeddings (positions numbered from the tokens, token types gathered) and head around
    # pre-norm layers: one dropout on the T x H stream, after attention (the FFN's output has none);
    # no LayerNorm on the embeddings, one after the last layer instead.
    FamilyForward(
        **_ROBERTA_HEAD, layer=PRE_NORM, hidden_dropouts=1, token_type_ids=False, embedding_indices=2
    ),
    lora_targets=("query", "value"),  # XLM-R's attention; peft's mapping has xlm-roberta only
    positions_after_padding=True,
    config_values=_published("xlm-roberta-xl", **_ROBERTA_PUBLISHED),
)
DISTILBERT = Family(
    "DistilBERT",
    ("distilbert",),
    FamilyForward(qkv=("q_lin", "k_lin", "v_lin"), hidden_dropouts=1, token_type_ids=False),
    lora_targets=("q_lin", "v_lin"),
    # DistilBERT's own config names: dim, n_layers, n_heads, hidden_dim.
    config_values=_published(
        "distilbert", ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim"), max_position_embeddings=512
    ),
)
ALBERT = Family(
    "ALBERT",
    ("albert",),
    lora_targets=("query", "value"),
    # One group of shared layer weights, a 128-wide embedding projected up; v2 trains without dropout.
    config_values=_published(
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
    ),
)
ELECTRA = Family(
    "ELECTRA",
    ("electra",),
    FamilyForward(**_ROBERTA_HEAD),  # RoBERTa's head with GELU: it keeps the dense output
    # BERT's values; each checkpoint gives its embedding_size (projected up to the hidden size).
    config_values=_published("electra", max_position_embeddings=512, type_vocab_size=2),
)
DEBERTA = Family(
    "DeBERTa",
    ("deberta",),
    # ContextPooler: dense and GELU on the first token (GELU keeps the dense output), then dropout.
    FamilyForward(layer=DISENTANGLED, qkv=("in_proj",) * 3, layer_norm_ops=True),
    fp16_overflows=True,
    # Its attention masks with the minimum of the query's dtype, fp32 once its fp32 bias is added, but
    # autocast computes the scores in bf16, whose range stops short of fp32's minimum.
    bf16_autocast_fails="masked_fill of bf16 attention scores with float32's minimum: 'value cannot be "
    "converted to type c10::BFloat16 without overflow' (transformers 5.25)",
)
DEBERTA_V2 = Family(
    "DeBERTa-v2/v3",
    ("deberta-v2",),
    FamilyForward(layer=DISENTANGLED, qkv=("query_proj", "key_proj", "value_proj")),
    fp16_overflows=True,
    config_values=_deberta_v2_values,
)
MODERNBERT = Family(
    "ModernBERT",
    ("modernbert",),
    # head: dense, GELU (keeps the dense output), LayerNorm (keeps GELU's output), then dropout.
    FamilyForward(layer=GATED_ROTARY, qkv=("Wqkv",) * 3, head=(3, 1), token_type_ids=False),
    lora_targets=("Wqkv",),
    without_flash_attention=(
        "transformers 5.x unpads ModernBERT's batches only under flash_attention_2: under sdpa every layer "
        "attends over the padding, with a B x S x S mask per layer (the sliding-window layers' too)"
    ),
    # Global attention in every third layer, a 128-token sliding window in the others.
    config_values=_published(
        "modernbert",
        max_position_embeddings=8192,
        global_attn_every_n_layers=3,
        local_attention=128,
        pad_token_id=50283,
    ),
)
MPNET = Family(
    "MPNet",
    ("mpnet",),
    FamilyForward(
        **_ROBERTA_HEAD, qkv=("q", "k", "v"), token_type_ids=False, embedding_indices=1, relative_bias=True
    ),
    lora_targets=("q", "v"),
    positions_after_padding=True,
    # RoBERTa's vocabulary ids and position offset; relative position buckets in every layer.
    config_values=_published(
        "mpnet",
        max_position_embeddings=514,
        relative_attention_num_buckets=32,
        layer_norm_eps=1e-5,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    ),
)

ERNIE = Family(
    "ERNIE",
    ("ernie",),
    # BERT's layers, pooler and head; ERNIE 3.0 (use_task_id) also embeds task type ids, which the
    # embeddings make as zeros when the batch has none.
    FamilyForward(index_flags=("use_task_id",)),
    lora_targets=("query", "value"),
    # The Hub's checkpoints (nghuyong/ernie-*) are PaddleNLP's, converted by nghuyong/ERNIE-Pytorch's
    # convert.py, which writes layer_norm_eps 1e-5 (and an FFN 4x the hidden size); 4 token types
    # (PaddleNLP's ERNIE_PRETRAINED_INIT_CONFIGURATION, paddlenlp/transformers/ernie/configuration.py).
    config_values=_published("ernie", type_vocab_size=4, layer_norm_eps=1e-5),
)

# The 2024-2025 long-context encoders transformers 5.x ships natively (no trust_remote_code).
EUROBERT = Family(
    "EuroBERT",
    ("eurobert",),
    # Llama's layer, bidirectional: RMSNorm before attention and FFN, one after the last layer; no
    # dropout on the hidden states, no token types. Its "late" head runs dense, GELU and the
    # classifier on every token, then averages the logits over the mask: T x H terms, not B x H.
    FamilyForward(
        layer=RMS_GATED,
        qkv=("q_proj", "k_proj", "v_proj"),
        hidden_dropouts=0,
        head=(0, 0),
        head_reads_a_view=False,
        token_type_ids=False,
    ),
    lora_targets=("q_proj", "v_proj"),  # Llama's, which peft's mapping has (eurobert it has not)
    # Every published size shares EuroBertConfig's defaults (its docstring: EuroBERT-210m) but the sizes
    # (and the key-value heads of the larger ones); 8,192 positions.
    config_values=_published("eurobert", max_position_embeddings=8192),
)
GTE = Family(
    "GTE",
    ("gte",),
    # BERT's post-norm layer with rotary Q and K and a gated FFN (gate_proj, up_proj, a dropout on
    # their product, down_proj); BERT's pooler and head; one token type.
    FamilyForward(layer=GATED_POST_NORM, qkv=("q_proj", "k_proj", "v_proj")),
    lora_targets=("q_proj", "v_proj"),
    # The first release with model_type gte (its wheel's models/gte/ and auto mappings; 5.17.0's has none).
    transformers_since="5.18.0",
    # gte-multilingual-base: 8,192 positions, one token type (GteConfig's defaults).
    config_values=_published("gte", max_position_embeddings=8192, type_vocab_size=1),
)
NOMIC_BERT = Family(
    "NomicBERT",
    ("nomic_bert",),
    # GTE's layer without biases and, as published, without dropout; BERT's pooler and head.
    FamilyForward(layer=GATED_POST_NORM, qkv=("q_proj", "k_proj", "v_proj")),
    lora_targets=("q_proj", "v_proj"),
    # nomic-embed-text-v1.5: 2,048 positions, no dropout (NomicBertConfig's defaults).
    config_values=_published("nomic_bert", max_position_embeddings=2048),
)

# Every family the project supports, in the order tables list them.
FAMILIES: tuple[Family, ...] = (
    BERT,
    ROBERTA,
    XLM_ROBERTA,
    XLM_ROBERTA_XL,
    DISTILBERT,
    ALBERT,
    ELECTRA,
    DEBERTA,
    DEBERTA_V2,
    MODERNBERT,
    MPNET,
    ERNIE,
    EUROBERT,
    GTE,
    NOMIC_BERT,
)
_BY_MODEL_TYPE: dict[str, Family] = {
    model_type: family for family in FAMILIES for model_type in family.model_types
}


def family_for(model_type: str) -> Family | None:
    """The family a config's model_type belongs to, or None for a model type no entry lists."""
    return _BY_MODEL_TYPE.get(model_type)
