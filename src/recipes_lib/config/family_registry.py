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

from dataclasses import dataclass

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


# Heads that drop out, dense, tanh, drop out, project (RobertaClassificationHead): no pooler.
_ROBERTA_HEAD = dict(head=(1, 4), head_reads_a_view=False)

BERT = Family("BERT", ("bert",))
ROBERTA = Family(
    "RoBERTa",
    # CamemBERT is RoBERTa's architecture under its own model_type (transformers copies the modules).
    ("roberta", "camembert"),
    FamilyForward(**_ROBERTA_HEAD, token_type_ids=False, embedding_indices=2),
    lora_targets=("query", "value"),  # camembert's: peft's mapping has roberta's only
    positions_after_padding=True,
)
XLM_ROBERTA = Family(
    "XLM-RoBERTa",
    ("xlm-roberta",),
    FamilyForward(**_ROBERTA_HEAD, token_type_ids=False, embedding_indices=2),
    positions_after_padding=True,
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
)
DISTILBERT = Family(
    "DistilBERT",
    ("distilbert",),
    FamilyForward(qkv=("q_lin", "k_lin", "v_lin"), hidden_dropouts=1, token_type_ids=False),
    lora_targets=("q_lin", "v_lin"),
)
ALBERT = Family(
    "ALBERT",
    ("albert",),
    lora_targets=("query", "value"),
)
ELECTRA = Family(
    "ELECTRA",
    ("electra",),
    FamilyForward(**_ROBERTA_HEAD),  # RoBERTa's head with GELU: it keeps the dense output
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
)
MPNET = Family(
    "MPNet",
    ("mpnet",),
    FamilyForward(
        **_ROBERTA_HEAD, qkv=("q", "k", "v"), token_type_ids=False, embedding_indices=1, relative_bias=True
    ),
    lora_targets=("q", "v"),
    positions_after_padding=True,
)

ERNIE = Family(
    "ERNIE",
    ("ernie",),
    # BERT's layers, pooler and head; ERNIE 3.0 (use_task_id) also embeds task type ids, which the
    # embeddings make as zeros when the batch has none.
    FamilyForward(index_flags=("use_task_id",)),
    lora_targets=("query", "value"),
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
)
NOMIC_BERT = Family(
    "NomicBERT",
    ("nomic_bert",),
    # GTE's layer without biases and, as published, without dropout; BERT's pooler and head.
    FamilyForward(layer=GATED_POST_NORM, qkv=("q_proj", "k_proj", "v_proj")),
    lora_targets=("q_proj", "v_proj"),
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
