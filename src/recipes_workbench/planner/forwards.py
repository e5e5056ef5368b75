"""What each encoder family's forward keeps for backward that neither its config nor its modules say.

One row per family of config/family_registry.py, keyed by its model_type, read off transformers'
modeling_<family>.py (5.x) and checked against measured steps of every family's tiny model
(tests/workbench/test_planner_families.py, which also checks that every family has a row). Only the
planner reads this table: a recipe never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

# How a layer computes, for the planner's arithmetic (arithmetic.py):
POST_NORM = "post-norm"  # BERT: LayerNorm after each residual sum
PRE_NORM = "pre-norm"  # XLM-R XL: LayerNorm before attention and before the FFN, one after the last layer
DISENTANGLED = "disentangled"  # DeBERTa: post-norm, attention over content and relative positions
GATED_ROTARY = "gated-rotary"  # ModernBERT: pre-norm, gated FFN, rotary positions, sliding windows
GATED_POST_NORM = "gated-post-norm"  # GTE, NomicBERT: BERT's post-norm layer, rotary Q and K, gated FFN
RMS_GATED = "rms-gated"  # EuroBERT: Llama's layer without the causal mask (RMSNorm first, gated SiLU FFN)


@dataclass(frozen=True)
class FamilyForward:
    """What an encoder family's forward keeps for backward that neither its config nor its modules say."""

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


# Heads that drop out, dense, tanh, drop out, project (RobertaClassificationHead): no pooler.
_ROBERTA_HEAD = dict(head=(1, 4), head_reads_a_view=False)
# RoBERTa's embeddings: positions numbered from the tokens, token types gathered, no token_type_ids.
_ROBERTA_EMBEDDINGS = dict(token_type_ids=False, embedding_indices=2)

FORWARDS: dict[str, FamilyForward] = {
    "bert": FamilyForward(),
    "roberta": FamilyForward(**_ROBERTA_HEAD, **_ROBERTA_EMBEDDINGS),
    "xlm-roberta": FamilyForward(**_ROBERTA_HEAD, **_ROBERTA_EMBEDDINGS),
    # XLM-R's embeddings and head around pre-norm layers: one dropout on the T x H stream, after
    # attention (the FFN's output has none); no LayerNorm on the embeddings, one after the last layer.
    "xlm-roberta-xl": FamilyForward(
        **_ROBERTA_HEAD, **_ROBERTA_EMBEDDINGS, layer=PRE_NORM, hidden_dropouts=1
    ),
    "distilbert": FamilyForward(qkv=("q_lin", "k_lin", "v_lin"), hidden_dropouts=1, token_type_ids=False),
    "albert": FamilyForward(),
    "electra": FamilyForward(**_ROBERTA_HEAD),  # RoBERTa's head with GELU: it keeps the dense output
    # ContextPooler: dense and GELU on the first token (GELU keeps the dense output), then dropout.
    "deberta": FamilyForward(layer=DISENTANGLED, qkv=("in_proj",) * 3, layer_norm_ops=True),
    "deberta-v2": FamilyForward(layer=DISENTANGLED, qkv=("query_proj", "key_proj", "value_proj")),
    # head: dense, GELU (keeps the dense output), LayerNorm (keeps GELU's output), then dropout.
    "modernbert": FamilyForward(layer=GATED_ROTARY, qkv=("Wqkv",) * 3, head=(3, 1), token_type_ids=False),
    "mpnet": FamilyForward(
        **_ROBERTA_HEAD, qkv=("q", "k", "v"), token_type_ids=False, embedding_indices=1, relative_bias=True
    ),
    # BERT's layers, pooler and head; ERNIE 3.0 (use_task_id) also embeds task type ids, which the
    # embeddings make as zeros when the batch has none.
    "ernie": FamilyForward(index_flags=("use_task_id",)),
    # Llama's layer, bidirectional: RMSNorm before attention and FFN, one after the last layer; no
    # dropout on the hidden states, no token types. Its "late" head runs dense, GELU and the
    # classifier on every token, then averages the logits over the mask: T x H terms, not B x H.
    "eurobert": FamilyForward(
        layer=RMS_GATED,
        qkv=("q_proj", "k_proj", "v_proj"),
        hidden_dropouts=0,
        head=(0, 0),
        head_reads_a_view=False,
        token_type_ids=False,
    ),
    # BERT's post-norm layer with rotary Q and K and a gated FFN (gate_proj, up_proj, a dropout on
    # their product, down_proj); BERT's pooler and head; one token type.
    "gte": FamilyForward(layer=GATED_POST_NORM, qkv=("q_proj", "k_proj", "v_proj")),
    # GTE's layer without biases and, as published, without dropout; BERT's pooler and head.
    "nomic_bert": FamilyForward(layer=GATED_POST_NORM, qkv=("q_proj", "k_proj", "v_proj")),
}
