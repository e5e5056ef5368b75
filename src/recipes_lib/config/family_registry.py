"""The encoder families, listed once: what transformers and peft cannot tell us about each (what they know:
modeling/families.py). A new family is one entry in FAMILIES, its tiny test config (tests/helpers/models.py)
and its planner row (recipes_workbench/planner/forwards.py). Imports nothing heavy: `recipes-lib plan` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str  # as tables and messages show it
    model_types: tuple[str, ...]  # the config.model_type values it covers; the first is its own
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
    # What the family loses on a CUDA GPU without the flash-attn package, in words: a recipe there
    # says so in one line (modeling/loading.py). None: nothing worth a line.
    without_flash_attention: str | None = None
    # The first transformers release that has the family's model_type, where it is newer than the
    # oldest release the project supports (setup.cfg): an older one gets one paragraph naming it.
    transformers_since: str | None = None

    @property
    def model_type(self) -> str:
        return self.model_types[0]


BERT = Family("BERT", ("bert",))
ROBERTA = Family(
    "RoBERTa",
    # CamemBERT is RoBERTa's architecture under its own model_type (transformers copies the modules).
    ("roberta", "camembert"),
    lora_targets=("query", "value"),  # camembert's: peft's mapping has roberta's only
    positions_after_padding=True,
)
XLM_ROBERTA = Family("XLM-RoBERTa", ("xlm-roberta",), positions_after_padding=True)
XLM_ROBERTA_XL = Family(
    "XLM-RoBERTa XL/XXL",
    ("xlm-roberta-xl",),
    lora_targets=("query", "value"),  # XLM-R's attention; peft's mapping has xlm-roberta only
    positions_after_padding=True,
)
DISTILBERT = Family("DistilBERT", ("distilbert",), lora_targets=("q_lin", "v_lin"))
ALBERT = Family("ALBERT", ("albert",), lora_targets=("query", "value"))
ELECTRA = Family("ELECTRA", ("electra",))
DEBERTA = Family(
    "DeBERTa",
    ("deberta",),
    fp16_overflows=True,
    # Its attention masks with the minimum of the query's dtype, fp32 once its fp32 bias is added, but
    # autocast computes the scores in bf16, whose range stops short of fp32's minimum.
    bf16_autocast_fails="masked_fill of bf16 attention scores with float32's minimum: 'value cannot be "
    "converted to type c10::BFloat16 without overflow' (transformers 5.25)",
)
DEBERTA_V2 = Family("DeBERTa-v2/v3", ("deberta-v2",), fp16_overflows=True)
MODERNBERT = Family(
    "ModernBERT",
    ("modernbert",),
    lora_targets=("Wqkv",),
    without_flash_attention=(
        "transformers 5.x unpads ModernBERT's batches only under flash_attention_2: under sdpa every layer "
        "attends over the padding, with a B x S x S mask per layer (the sliding-window layers' too)"
    ),
)
MPNET = Family("MPNet", ("mpnet",), lora_targets=("q", "v"), positions_after_padding=True)
ERNIE = Family("ERNIE", ("ernie",), lora_targets=("query", "value"))

# The 2024-2025 long-context encoders transformers 5.x ships natively (no trust_remote_code).
EUROBERT = Family(
    "EuroBERT",
    ("eurobert",),
    lora_targets=("q_proj", "v_proj"),  # Llama's, which peft's mapping has (eurobert it has not)
)
GTE = Family(
    "GTE",
    ("gte",),
    lora_targets=("q_proj", "v_proj"),
    # The first release with model_type gte (its wheel's models/gte/ and auto mappings; 5.17.0's has none).
    transformers_since="5.18.0",
)
NOMIC_BERT = Family("NomicBERT", ("nomic_bert",), lora_targets=("q_proj", "v_proj"))

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
    return _BY_MODEL_TYPE.get(model_type)
