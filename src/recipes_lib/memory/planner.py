"""Predict a recipe's peak training memory from the model's config alone: no weights, no GPU.

    recipes-lib plan --model bert-base-uncased --recipe all --per_device_train_batch_size 32 --max_seq_length 128 --bf16

What a recipe changes reaches the planner as data, its `TrainingShape` (recipe_spec.py): LoRA
adapters or none, a 4-bit base or not, 8-bit or 32-bit optimizer state. This module is the
arithmetic; planner_report.py prints it.

The prediction has the five parts that results.json measures (memory.py), plus the CUDA context:

    weights          parameters and buffers: 4 B each in fp32; a quantized base's NF4 linear weights
                     0.5 B + 1/64 B (8-bit block scale per 64 weights) + 4/16,384 B (fp32 scale of
                     the scales per 256 blocks), about 0.516 B
    gradients        4 B per trainable parameter (fp32, as the weights that train are fp32)
    optimizer_state  AdamW: 2 moments x 4 B + a 4 B step counter per tensor; 8-bit AdamW
                     (optimizer_bits 8): 2 x 1 B + 2 x 4 B of absmax per 256-element block = 2.03 B
                     for tensors of >= 4,096 elements (the embeddings stay 32-bit unless
                     embedding_optimizer_bits is 8)
    activations      what forward saves for backward, layer by layer (below), at the peak of backward
    other            the input batch (int64 ids, token types, mask)
    cuda_overhead    CUDA context + cuBLAS workspace, outside PyTorch's allocator (--cuda_overhead_gib)

The parts do not all peak at once: the Trainer frees the gradients after every optimizer step, so
they build up in backward while the activations go. The predicted peak is weights + optimizer
state + the larger of activations and gradients (both, with gradient accumulation) + the batch,
plus the CUDA context; the plain sum of the parts is shown as an upper bound.

Parameters are counted exactly by building the model on PyTorch's meta device (shapes, no memory)
and, with adapters, wrapping it with the same `adapters.add_lora` the recipes train with.

Activations, per encoder layer, for T = batch x length tokens, hidden H, FFN width F, A heads
(e = 4 B in fp32, 2 B in bf16 mixed precision; m = dropout mask: 1 B on CUDA (bool), the tensor's
own size on CPU, where PyTorch draws a float noise tensor; LayerNorm and residual sums stay fp32):

    attention, eager or math kernel   3 T x H x e  copies of Q, K, V made contiguous for the matmuls
                                      B x A x S x S x (e + m + e)  softmax output, dropout mask and
                                                  dropped probabilities (no dropout: softmax only)
                                      T x H x e   context, input of the output projection
    attention, fused SDPA kernel      Q, K, V and the output (4 T x H x e) + log-sum-exp (B x A x S x 4 B)
                                      + the padding mask made float per layer (B x S x S x e)
    after attention and after FFN     2 x (T x H x m dropout mask + T x H x 4 residual sum kept by
                                      LayerNorm + T x H LayerNorm output + 2 T x 4 mean/rstd)
    FFN                               T x F x e GELU input + T x F x e GELU output
    under bf16 autocast               each linear keeps its own bf16 copy of its input and weight

Adapters (LoRA) freeze the base, so a frozen linear keeps neither its input nor (past layer 0) gradients
flow into the embeddings; each adapter keeps its dropout mask, its dropped input and its
T x r down-projection. The peak comes early in backward, in the top layer, when the gradient of
the FFN (or, for long sequences, of the attention probabilities) joins the saved tensors; that
transient is added. Gradient checkpointing keeps only each layer's input (T x H x 4) and
recomputes one layer at a time, so the peak is all layer inputs + one layer + the transient.

Encoder families. The sizes come from each family's config and from its model built on the meta
device (Encoder.from_config): FFN width (DistilBERT's hidden_dim, ModernBERT's gated 2F-wide first
linear), embedding width (ALBERT and ELECTRA project E up to H), one layer's weights, what the
FFN activation keeps (run once: ALBERT's gelu_new keeps 4 T x F), the attention kernels the class
has (DeBERTa and MPNet: eager only) and the linears the adapters wrap ("auto": the family's own).
What each forward keeps beyond BERT's layer is written by hand, per family (FamilyForward):

    RoBERTa, XLM-R, ELECTRA, MPNet   BERT's layer; a head that drops out before its dense layer (no
                                     pooler); RoBERTa numbers positions from the tokens (int64 ids)
    MPNet                            one relative position bias (B x A x S x S) per forward
    DistilBERT                       one dropout per layer (after the FFN); pre_classifier, no pooler
    ALBERT                           parameters of one shared layer group, activations of every layer
    DeBERTa, DeBERTa-v2/v3           c2p and p2c scores (B x A x S x 2k each, kept by gather) against
                                     the relative position table projected and expanded to the batch
                                     (B x 2k x H each); the table's dropout per layer; an int64 mask
    ModernBERT                       pre-norm; Wqkv's output (3 T x H) and rotated Q and K kept by SDPA;
                                     the gated FFN's 2F-wide input; float masks of the sliding-window
                                     layers; no token types, no biases; the head's dense layer and norm

tests/test_planner.py checks the prediction against the measured breakdown on CPU, and
tests/test_planner_families.py does for every family.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from recipes_lib.config.recipe_spec import LoraShape, TrainingShape
from recipes_lib.errors import ConfigError, ModelError, RecipeError
from recipes_lib.units import BREAKDOWN_KEYS, GIB

# bitsandbytes' defaults: 8-bit optimizer state only for tensors of at least this many elements,
# quantized in blocks of 256 values (one fp32 absmax each); two 256-entry fp32 quantization maps.
MIN_8BIT_SIZE = 4096
OPTIMIZER_8BIT_BLOCK = 256
OPTIMIZER_8BIT_MAPS_BYTES = 2 * 256 * 4
# NF4 with double quantization (bitsandbytes): 64 weights per block, block scales in 8 bits,
# 256 scales per fp32 second-level scale; a 16-value NF4 table, a 256-value map and an offset.
NF4_BLOCK = 64
NF4_SCALE_BLOCK = 256
NF4_CONSTANT_BYTES = 16 * 4 + 256 * 4 + 4
# The CUDA context and cuBLAS workspace live outside PyTorch's allocator, so max_memory_allocated
# never shows them. This default is an assumption, not a measurement made here: on a GPU, a run's
# results.json gives device_used_gib - reserved_at_end_gib per phase (memory.py): the context and
# workspace, on a GPU no other process uses. Pass that with --cuda_overhead_gib.
DEFAULT_CUDA_OVERHEAD_GIB = 0.5

# Several processes (accelerate_configs/): the parts of the training state each process keeps only
# 1/N of, for N processes; the other parts every process holds in full. Activations belong to each
# process's own batch, so they never divide.
#   none                DDP (multi_gpu.yaml): every process holds everything
#   zero1               DeepSpeed ZeRO-1: optimizer state
#   zero2               DeepSpeed ZeRO-2 (deepspeed_zero2.yaml): optimizer state, gradients
#   fsdp_shard_grad_op  FSDP SHARD_GRAD_OP: the same; weights are gathered in full from forward to
#                       the end of backward, so at the peak every process holds all of them
#   zero3               DeepSpeed ZeRO-3 (deepspeed_zero3.yaml): optimizer state, gradients, weights
#   fsdp_full_shard     FSDP FULL_SHARD (fsdp.yaml): optimizer state, gradients, weights
# With the weights sharded, each process still gathers the full weights of the layer it computes
# (FSDP wraps one unit per BertLayer; ZeRO-3 gathers submodules as they run): one encoder layer,
# in bf16 under mixed precision, is added to the weights. The split follows this planner's layout
# (fp32 weights and gradients, as the Trainer keeps them); DeepSpeed's bf16 mode keeps bf16 weights
# and gradients and an fp32 master copy in the optimizer state: the same bytes, split differently.
SHARDED_PARTS: dict[str, tuple[str, ...]] = {
    "none": (),
    "zero1": ("optimizer_state",),
    "zero2": ("optimizer_state", "gradients"),
    "fsdp_shard_grad_op": ("optimizer_state", "gradients"),
    "zero3": ("optimizer_state", "gradients", "weights"),
    "fsdp_full_shard": ("optimizer_state", "gradients", "weights"),
}

logger = logging.getLogger(__name__)

# Published config.json values of the BERT checkpoints people mean by these names, so the planner
# answers offline with nothing downloaded. A local directory or config.json always wins.
_BERT_UNCASED_VOCAB, _BERT_CASED_VOCAB = 30522, 28996
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "bert-base-uncased": dict(vocab_size=_BERT_UNCASED_VOCAB),  # BertConfig's defaults are bert-base-uncased
    "bert-base-cased": dict(vocab_size=_BERT_CASED_VOCAB),
    "bert-large-uncased": dict(
        vocab_size=_BERT_UNCASED_VOCAB,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
    ),
    "bert-large-cased": dict(
        vocab_size=_BERT_CASED_VOCAB,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
    ),
}
KNOWN_CONFIGS.update({f"google-bert/{name}": values for name, values in list(KNOWN_CONFIGS.items())})


def bert_shape(layers: int, hidden: int) -> dict[str, Any]:
    """BERT's proportions at another size: 64-wide heads, FFN 4x the hidden size (Devlin et al.)."""
    return dict(
        vocab_size=_BERT_UNCASED_VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        intermediate_size=4 * hidden,
    )


# The BERT family, smallest first: Google's released sizes (Turc et al. 2019 for the four small
# ones), then the same architecture scaled up, to show where each recipe stops fitting.
BERT_FAMILY: tuple[tuple[str, dict[str, Any]], ...] = (
    ("bert-tiny (L2 H128)", bert_shape(2, 128)),
    ("bert-mini (L4 H256)", bert_shape(4, 256)),
    ("bert-small (L4 H512)", bert_shape(4, 512)),
    ("bert-medium (L8 H512)", bert_shape(8, 512)),
    ("bert-base (L12 H768)", bert_shape(12, 768)),
    ("bert-large (L24 H1024)", bert_shape(24, 1024)),
    ("L24 H1536", bert_shape(24, 1536)),
    ("L24 H2048", bert_shape(24, 2048)),
    ("L36 H2048", bert_shape(36, 2048)),
    ("L48 H2560", bert_shape(48, 2560)),
    ("L48 H3072", bert_shape(48, 3072)),
    ("L64 H4096", bert_shape(64, 4096)),
)


@dataclass(frozen=True)
class Setup:
    """How the model trains: what changes the memory besides the model itself."""

    # What the recipe changes (adapters, a 4-bit base, 8-bit optimizer state): all the arithmetic reads.
    shape: TrainingShape = TrainingShape()
    # The recipe's name, or any words: shown in reports, never read by the arithmetic.
    label: str = ""
    batch_size: int = 32
    seq_length: int = 128
    bf16: bool = False
    gradient_checkpointing: bool = False
    device: str = "cuda"  # "cuda" or "cpu": their attention kernels and dropout masks differ
    attention: str = "sdpa"  # or "eager"
    # Padded batches give the fused attention kernel a mask, which it makes float per layer.
    padded: bool = True
    # Above 1, gradients stay from one micro-batch to the next, so they meet the activations.
    gradient_accumulation_steps: int = 1
    cuda_overhead_gib: float = DEFAULT_CUDA_OVERHEAD_GIB
    # Processes training together and how they shard the training state (SHARDED_PARTS).
    num_processes: int = 1
    sharding: str = "none"

    @property
    def sharded_parts(self) -> tuple[str, ...]:
        """The parts each process keeps 1/num_processes of."""
        return SHARDED_PARTS[self.sharding] if self.num_processes > 1 else ()

    @property
    def adapters(self) -> LoraShape | None:
        return self.shape.adapters

    @property
    def adapted_attention(self) -> set[str]:
        """BERT's attention projections (query, key, value) the target names name ('all-linear': all
        three). The arithmetic reads the adapted linears off the model itself (Encoder.adapters)."""
        if self.shape.adapters is None:
            return set()
        targets = self.shape.adapters.target_modules
        names = {"query", "key", "value"} if _is_all_linear(targets) else set(targets)
        return names & {"query", "key", "value"}


def _is_all_linear(targets: tuple[str, ...] | str) -> bool:
    if isinstance(targets, str):
        return targets.lower() == "all-linear"
    return [name.lower() for name in targets] == ["all-linear"]


@dataclass(frozen=True)
class FamilyForward:
    """What an encoder family's forward keeps for backward that neither its config nor its modules say.

    Read off transformers' modeling_<family>.py (5.x) and checked against measured training steps
    of a tiny model of every family (tests/test_planner_families.py). Everything that has a size
    comes from the config and the model built on the meta device (`Encoder.from_config`).
    """

    # Which layer arithmetic: "post-norm" (BERT: LayerNorm after each residual sum), "deberta"
    # (disentangled attention over relative positions) or "modernbert" (pre-norm, gated FFN, rotary).
    layer: str = "post-norm"
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
    # MPNet: one relative position bias per forward, from an embedding of S x S bucket ids.
    relative_bias: bool = False


_ROBERTA_HEAD = dict(head=(1, 4), head_reads_a_view=False)  # dropout, dense, tanh, dropout, out_proj
FAMILY_FORWARDS: dict[str, FamilyForward] = {
    "bert": FamilyForward(),
    "roberta": FamilyForward(**_ROBERTA_HEAD, token_type_ids=False, embedding_indices=2),
    "xlm-roberta": FamilyForward(**_ROBERTA_HEAD, token_type_ids=False, embedding_indices=2),
    "electra": FamilyForward(**_ROBERTA_HEAD),  # the same head with GELU: it keeps the dense output
    "mpnet": FamilyForward(
        **_ROBERTA_HEAD, qkv=("q", "k", "v"), token_type_ids=False, embedding_indices=1, relative_bias=True
    ),
    "distilbert": FamilyForward(qkv=("q_lin", "k_lin", "v_lin"), hidden_dropouts=1, token_type_ids=False),
    "albert": FamilyForward(),
    # ContextPooler: dense and GELU on the first token (GELU keeps the dense output), then dropout.
    "deberta": FamilyForward(layer="deberta", qkv=("in_proj",) * 3, layer_norm_ops=True),
    "deberta-v2": FamilyForward(layer="deberta", qkv=("query_proj", "key_proj", "value_proj")),
    # head: dense, GELU (keeps the dense output), LayerNorm (keeps GELU's output), then dropout.
    "modernbert": FamilyForward(layer="modernbert", qkv=("Wqkv",) * 3, head=(3, 1), token_type_ids=False),
}


@dataclass(frozen=True)
class Adapter:
    """A LoRA-adapted linear layer of one encoder layer."""

    name: str  # its path inside the layer, e.g. attention.self.query
    inputs: int
    outputs: int
    role: str  # "qkv" (reads the attention's input, as Q, K and V do) or "other"
    projections: frozenset[str] = frozenset()  # which of query, key, value it computes


@dataclass(frozen=True)
class RelativePositions:
    """DeBERTa's disentangled attention: content-to-position (c2p) and position-to-content (p2c)
    scores against a table of relative position embeddings."""

    c2p: bool
    p2c: bool
    max_relative_positions: int  # the table holds 2 x this many rows (v1), or of the buckets (v2)
    position_buckets: int  # v2/v3: log buckets (256 for v3); 0: one row per distance
    table_rows: int  # rows of rel_embeddings
    table_norm: bool  # v2/v3 normalizes the table once per forward (norm_rel_ebd="layer_norm")
    separate_projections: bool  # v1 (pos_proj, pos_q_proj) or v2 without share_att_key

    def span(self, seq_length: int) -> int:
        """Half the positions a score row looks at: c2p and p2c scores are S x 2 span wide."""
        if self.position_buckets > 0:
            return self.position_buckets
        return min(seq_length, self.max_relative_positions)


@dataclass(frozen=True)
class Encoder:
    """What decides an encoder's activation memory: sizes from its config, structure from its modules.

    `from_config` builds the model on the meta device (shapes only, no memory) and reads off what the
    config does not say under BERT's names: the FFN width (DistilBERT's hidden_dim; ModernBERT's gated
    FFN, whose first linear is twice as wide), the token embedding width (ALBERT and ELECTRA project
    a narrower embedding up), one layer's weights, what the FFN activation keeps for backward (run
    once on a small tensor), whether the class has a fused attention kernel, and, for a LoRA shape,
    which linears of a layer carry adapters. What the forward keeps beyond that is its FamilyForward.
    """

    model_type: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    hidden_dropout: float
    attention_dropout: float
    classifier_dropout: float
    # The defaults below are BERT's: an Encoder built by hand with the fields above is bert-base-like.
    embedding: int = 0  # token embedding width; 0: the hidden size
    embedding_dropout: float | None = None  # None: hidden_dropout
    family: FamilyForward = FamilyForward()
    sdpa: bool = True  # the model class runs PyTorch's SDPA (DeBERTa and MPNet: eager attention only)
    checkpointing: bool = True  # the class supports activation checkpointing (ALBERT and MPNet do not)
    activation_keeps: int = 1  # T x F tensors the FFN activation keeps (GELU: its input; tanh-GELU: 4)
    activation_keeps_output: bool = False  # ReLU keeps its output, which the next linear reads anyway
    gated_ffn: bool = False  # the first FFN linear is 2F wide: activation(one half) x the other half
    layer_parameters: int = 0  # one layer's parameters; 0: BERT's
    layer_linear_weights: int = 0  # one layer's linear weights; 0: BERT's
    adapters: tuple[Adapter, ...] = ()  # the LoRA-adapted linears of one layer
    head_trains: bool = True  # the head's first linear trains (with adapters: when it is new, or asked)
    relative: RelativePositions | None = None  # DeBERTa
    sliding_layers: int = 0  # ModernBERT: layers with local (sliding-window) attention

    @property
    def embedding_width(self) -> int:
        return self.embedding or self.hidden

    @property
    def embedding_drop(self) -> float:
        return self.hidden_dropout if self.embedding_dropout is None else self.embedding_dropout

    @property
    def adapted_projections(self) -> set[str]:
        """Which of query, key, value carry adapters (a fused projection: all three)."""
        return set().union(*(adapter.projections for adapter in self.adapters)) if self.adapters else set()

    @classmethod
    def from_config(cls, config, adapters: LoraShape | None = None) -> Encoder:
        """The encoder of `config`; with `adapters`, the linears of a layer they wrap (cached per config)."""
        key = (config.to_json_string(use_diff=False), type(config), adapters)
        if key not in _ENCODERS:
            if len(_ENCODERS) > 64:
                _ENCODERS.clear()
            _ENCODERS[key] = _describe_encoder(config, adapters)
        return _ENCODERS[key]


_ENCODERS: dict[tuple, Encoder] = {}


def _family_of(config) -> FamilyForward:
    family = FAMILY_FORWARDS.get(config.model_type)
    if family is not None:
        return family
    missing = [
        name
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        if getattr(config, name, None) is None
    ]
    if missing:
        known = ", ".join(FAMILY_FORWARDS)
        raise ModelError(
            f"The planner knows these encoder families: {known}, and BERT-like configs; this "
            f"{config.model_type} config has no {', '.join(missing)}."
        )
    return FamilyForward()  # an unknown family with BERT's config names: planned as BERT


def _layer_path(model) -> str:
    """The module path of the first of the repeated encoder layers (families.py finds the stack)."""
    from recipes_lib.modeling.families import profile_for

    paths = profile_for(model.config).layer_modules
    if not paths:
        raise ModelError(
            f"The planner found no stack of encoder layers in this {model.config.model_type} model."
        )
    return f"{paths[0]}.0"


def _activation_module(layer):
    """The layer's FFN activation: its first module of a class transformers' ACT2FN names."""
    from transformers.activations import ACT2CLS

    classes = tuple({entry[0] if isinstance(entry, tuple) else entry for entry in ACT2CLS.values()})
    return next((module for module in layer.modules() if isinstance(module, classes)), None)


def what_activation_keeps(activation) -> tuple[int, bool]:
    """(how many tensors of its input's size the activation keeps for backward, whether its output is one).

    Measured by running it once on a small tensor: GELU keeps its input; the tanh approximation
    written out in Python (ALBERT's gelu_new) keeps its input, tanh, 1 + tanh and x / 2; ReLU its output.
    """
    import torch

    if activation is None:
        return 1, False
    kept: dict[int, torch.Tensor] = {}

    def pack(tensor):
        if tensor.numel() == 32:
            kept[tensor.untyped_storage().data_ptr()] = tensor
        return tensor

    with torch.device("cpu"):
        x = torch.linspace(-2, 2, 32, requires_grad=True) * 1.0  # a non-leaf, as a linear's output is
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            y = activation(x)
    return len(kept), y.untyped_storage().data_ptr() in kept


def _describe_encoder(config, adapters: LoraShape | None) -> Encoder:
    from torch import nn

    from recipes_lib.modeling.families import meta_model

    family = _family_of(config)
    model = meta_model(config)
    layer_path = _layer_path(model)
    layer = model.get_submodule(layer_path)
    linears = {name: module for name, module in layer.named_modules() if isinstance(module, nn.Linear)}
    embeddings = [
        m for m in model.modules() if isinstance(m, nn.Embedding) and m.num_embeddings == config.vocab_size
    ]
    heads = config.num_attention_heads
    hidden = config.hidden_size
    intermediate = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", None)
    gated = False
    if family.layer == "modernbert":  # Wi projects to 2 x intermediate: GELU(one half) x the other half
        gated = linears["mlp.Wi"].out_features == 2 * linears["mlp.Wo"].in_features
        intermediate = linears["mlp.Wo"].in_features
    keeps, keeps_output = what_activation_keeps(_activation_module(layer))
    relative = None
    if family.layer == "deberta" and getattr(config, "relative_attention", False):
        pos_att_type = getattr(config, "pos_att_type", None) or []
        max_relative = getattr(config, "max_relative_positions", -1)
        max_relative = config.max_position_embeddings if max_relative < 1 else max_relative
        table = model.get_submodule(layer_path.rsplit(".layer.", 1)[0]).rel_embeddings
        relative = RelativePositions(
            c2p="c2p" in pos_att_type,
            p2c="p2c" in pos_att_type,
            max_relative_positions=max_relative,
            position_buckets=max(getattr(config, "position_buckets", -1), 0),
            table_rows=table.num_embeddings,
            table_norm="layer_norm" in getattr(config, "norm_rel_ebd", "none"),
            separate_projections=config.model_type == "deberta"
            or not getattr(config, "share_att_key", False),
        )
    classifier_dropout = next(
        (
            float(value)
            for value in (getattr(config, name, None) for name in _CLASSIFIER_DROPOUTS)
            if value is not None
        ),
        None,
    )
    hidden_dropout = float(_first(config, _HIDDEN_DROPOUTS, 0.1) or 0.0)
    return Encoder(
        model_type=config.model_type,
        hidden=hidden,
        layers=config.num_hidden_layers,
        heads=heads,
        intermediate=intermediate,
        hidden_dropout=hidden_dropout,
        attention_dropout=float(_first(config, _ATTENTION_DROPOUTS, 0.1) or 0.0),
        classifier_dropout=hidden_dropout if classifier_dropout is None else classifier_dropout,
        embedding=embeddings[0].embedding_dim if embeddings else hidden,
        embedding_dropout=float(_first(config, ("embedding_dropout",), hidden_dropout) or 0.0),
        family=family,
        sdpa=bool(getattr(type(model), "_supports_sdpa", False)),
        checkpointing=bool(getattr(type(model), "supports_gradient_checkpointing", False)),
        activation_keeps=keeps,
        activation_keeps_output=keeps_output,
        gated_ffn=gated,
        layer_parameters=sum(p.numel() for p in layer.parameters()),
        layer_linear_weights=sum(m.weight.numel() for m in linears.values()),
        **(_adapters_and_head(config, model, layer_path, family, adapters) if adapters else {}),
        relative=relative,
        sliding_layers=sum(
            kind == "sliding_attention" for kind in getattr(config, "layer_types", None) or ()
        ),
    )


# Config names of the dropout probabilities, by family (the first that is set wins).
_HIDDEN_DROPOUTS = ("hidden_dropout_prob", "dropout", "mlp_dropout")
_ATTENTION_DROPOUTS = ("attention_probs_dropout_prob", "attention_dropout")
_CLASSIFIER_DROPOUTS = ("classifier_dropout", "classifier_dropout_prob", "seq_classif_dropout", "cls_dropout")


def _first(config, names: tuple[str, ...], default):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def _adapters_and_head(config, model, layer_path: str, family: FamilyForward, shape: LoraShape) -> dict:
    """The linears of one encoder layer that these adapters wrap, as peft matches them, and whether the
    head's first linear (pooler, pre_classifier: hidden x hidden) trains, on the meta model."""
    from torch import nn

    from recipes_lib.modeling.adapters import add_lora

    stack = layer_path.rsplit(".", 1)[0] + "."
    head = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
        and stack not in f"{name}."
        and module.in_features == module.out_features == config.hidden_size
    ]
    model.newly_initialized_modules = modules_the_checkpoint_lacks(config, model)
    wrapped = add_lora(model, shape)
    trained = {name for name, parameter in wrapped.named_parameters() if parameter.requires_grad}
    # Its own weight trains (in full), or an adapter reads its input as it is (no LoRA dropout).
    head_trains = any(
        f"{path}." in f".{name}" and ("lora_" not in name or shape.dropout == 0)
        for name in trained
        for path in head
    )
    marker = f"{layer_path}."
    found = []
    for name, module in wrapped.named_modules():
        if (
            marker not in name
            or not hasattr(module, "lora_A")
            or not isinstance(module.base_layer, nn.Linear)
        ):
            continue
        inside = name.split(marker, 1)[1]
        last = inside.rsplit(".", 1)[-1]
        projections = frozenset(
            role
            for role, projection in zip(("query", "key", "value"), family.qkv, strict=True)
            if projection == last
        )
        base = module.base_layer
        found.append(
            Adapter(
                inside, base.in_features, base.out_features, "qkv" if projections else "other", projections
            )
        )
    return {"adapters": tuple(found), "head_trains": head_trains}


@dataclass
class Parameters:
    """Parameter counts of the model a recipe trains, from the meta device."""

    total: int
    trainable: int
    trainable_tensors: list[tuple[int, bool]]  # (elements, is an nn.Embedding weight)
    buffer_bytes: int
    quantized_linears: list[int] = field(default_factory=list)  # a 4-bit base: elements of each NF4 weight


def count_parameters_on_meta(config, shape: TrainingShape | None = None) -> Parameters:
    """Build the model a recipe of this shape trains on the meta device and count what it holds, by kind.

    Shapes only, no memory, no download: bert-large counts in a second. `.total` and `.trainable`
    are what `modeling.count_parameters` gives for the real model (a 4-bit base holds the same
    number of parameters, packed), for every family: the adapters wrap the layers `add_lora` wraps
    ("auto": the family's own), and train in full what the checkpoint lacks, as in a recipe
    (`modules_the_checkpoint_lacks`).
    """
    from torch import nn

    from recipes_lib.modeling.families import linears_outside_layers, meta_model

    shape = shape or TrainingShape()
    model = meta_model(config)
    quantized = []
    if shape.quantized_base:
        # The linears of the repeated encoder layers in NF4; the head, the pooler and other
        # projections stay in full precision, as adapters.nf4_quantization_config keeps them.
        keep = set(linears_outside_layers(config))
        quantized = [
            module.weight.numel()
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name not in keep
        ]
    if shape.adapters is not None:
        from recipes_lib.modeling.adapters import add_lora

        model.newly_initialized_modules = modules_the_checkpoint_lacks(config, model)
        model = add_lora(model, shape.adapters)
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    seen, total, trainable, tensors = set(), 0, 0, []
    for parameter in model.parameters():
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        total += parameter.numel()
        if parameter.requires_grad:
            trainable += parameter.numel()
            tensors.append((parameter.numel(), id(parameter) in embedding_ids))
    buffer_bytes = sum(buffer.numel() * buffer.element_size() for buffer in model.buffers())
    return Parameters(total, trainable, tensors, buffer_bytes, quantized)


def modules_the_checkpoint_lacks(config, model) -> tuple[str, ...]:
    """The modules of the classification model that a checkpoint with this config has no weights for.

    What `modeling.load_model` reads from the loading report, told from config.json alone: the
    modules outside the base model (the head; DeBERTa's pooler; DistilBERT's pre_classifier) less
    those the class config.json names (`architectures`) has too: ModernBertForMaskedLM brings the
    head's dense layer and norm, a ...ForSequenceClassification checkpoint everything. A config
    that names no class (or the base model) is a base model's: everything outside it is new.
    """
    import transformers

    def outside_base(network) -> set[str]:
        prefix = network.base_model_prefix
        return {
            path
            for path, module in network.named_modules()
            if path
            and path != prefix
            and not path.startswith(f"{prefix}.")
            and any(True for _ in module.parameters(recurse=False))
        }

    lacking = outside_base(model)
    for name in getattr(config, "architectures", None) or ():
        checkpoint_class = getattr(transformers, name, None)
        if checkpoint_class is None or not hasattr(checkpoint_class, "base_model_prefix"):
            continue
        try:
            import torch

            with torch.device("meta"):
                checkpoint = checkpoint_class(config)
        except Exception:  # a class that cannot be built from this config: assume a base model's weights
            break
        lacking -= outside_base(checkpoint)
        break
    return tuple(sorted(lacking))


# --- the five parts -------------------------------------------------------------------------------


def weight_bytes(parameters: Parameters, setup: Setup) -> int:
    fp32 = 4 * (parameters.total - sum(parameters.quantized_linears))
    nf4 = sum(
        math.ceil(n / 2)
        + math.ceil(n / NF4_BLOCK)
        + 4 * math.ceil(n / NF4_BLOCK / NF4_SCALE_BLOCK)
        + NF4_CONSTANT_BYTES
        for n in parameters.quantized_linears
    )
    return fp32 + nf4 + parameters.buffer_bytes


def gradient_bytes(parameters: Parameters) -> int:
    return 4 * parameters.trainable


def optimizer_bytes(parameters: Parameters, setup: Setup) -> int:
    if setup.shape.optimizer_bits == 32:
        # torch AdamW: exp_avg and exp_avg_sq in fp32, and a 4 B step tensor per parameter tensor.
        return 8 * parameters.trainable + 4 * len(parameters.trainable_tensors)
    total = OPTIMIZER_8BIT_MAPS_BYTES
    for elements, is_embedding in parameters.trainable_tensors:
        keep_32bit = elements < MIN_8BIT_SIZE or (is_embedding and setup.shape.embedding_optimizer_bits == 32)
        if keep_32bit:
            total += 8 * elements
        else:
            total += 2 * elements + 2 * 4 * math.ceil(elements / OPTIMIZER_8BIT_BLOCK)
    return total


def input_bytes(setup: Setup, encoder: Encoder | None = None) -> int:
    # input_ids, attention_mask and, where the family's tokenizer gives them, token_type_ids
    # (int64, batch x length), and the labels.
    tensors = 3 if encoder is None or encoder.family.token_type_ids else 2
    return tensors * 8 * setup.batch_size * setup.seq_length + 8 * setup.batch_size


def _fused_attention(encoder: Encoder, setup: Setup) -> bool:
    """Whether the attention runs a fused kernel that never stores the S x S probabilities.

    SDPA on CUDA always does (flash or memory-efficient kernel, dropout included). On CPU PyTorch's
    fused kernel has no dropout, so training with attention dropout falls back to the math kernel,
    which stores what eager attention stores. DeBERTa and MPNet have no SDPA path: always eager.
    """
    if setup.attention != "sdpa" or not encoder.sdpa:
        return False
    return setup.device == "cuda" or encoder.attention_dropout == 0


class _Sizes:
    """The letters of the arithmetic for one setup: B, S, T = B x S tokens, H, F, A, E and e, the bytes
    of a matmul output (4 in fp32, 2 under bf16 autocast)."""

    def __init__(self, encoder: Encoder, setup: Setup):
        self.B, self.S, self.H, self.F, self.A = (
            setup.batch_size,
            setup.seq_length,
            encoder.hidden,
            encoder.intermediate,
            encoder.heads,
        )
        self.T = self.B * self.S
        self.E = encoder.embedding_width
        self.P = self.B * self.A * self.S * self.S  # attention probabilities
        self.e = 2 if setup.bf16 else 4
        self.cuda = setup.device == "cuda"

    def mask(self, elements: int, element_bytes: int) -> int:
        # A CUDA dropout keeps a bool mask; a CPU dropout keeps the float noise it multiplied by.
        return elements * (1 if self.cuda else element_bytes)


def layer_activation_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """Bytes that one encoder layer's forward keeps for backward, by what they are."""
    kind = encoder.family.layer
    if kind == "deberta":
        return _deberta_layer_terms(encoder, setup)
    if kind == "modernbert":
        return _modernbert_layer_terms(encoder, setup)
    return _post_norm_layer_terms(encoder, setup)


def _post_norm_layer_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """BERT's layer, and RoBERTa's, XLM-R's, ELECTRA's, MPNet's, DistilBERT's and ALBERT's: attention
    and FFN, each followed by dropout, a residual sum and LayerNorm."""
    z = _Sizes(encoder, setup)
    T, H, e = z.T, z.H, z.e
    fused = _fused_attention(encoder, setup)
    frozen_base = setup.adapters is not None
    layer: dict[str, int] = {}
    if fused:
        layer["attention Q, K, V, output"] = 4 * T * H * e
        layer["attention log-sum-exp"] = z.B * z.A * z.S * 4
        if setup.padded:
            layer["attention mask, float"] = z.B * z.S * z.S * e
    else:
        layer["Q, K, V contiguous copies"] = 3 * T * H * e
        layer.update(_probability_terms(encoder, setup))
        if not frozen_base:
            layer["context (output projection input)"] = T * H * e
    if encoder.hidden_dropout > 0:
        layer["dropout masks on the hidden states"] = encoder.family.hidden_dropouts * z.mask(T * H, e)
    layer["residual sums kept by LayerNorm"] = 2 * T * H * 4
    layer["LayerNorm mean and rstd"] = 2 * 2 * T * 4
    layer.update(_ffn_and_linear_terms(encoder, setup))
    return layer


def _probability_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """The S x S attention probabilities an eager (or math-kernel) attention keeps, per layer."""
    z = _Sizes(encoder, setup)
    terms = {"attention probabilities": z.P * 4}  # softmax runs in fp32 under autocast
    if encoder.attention_dropout > 0:
        terms["attention dropout mask + output"] = z.mask(z.P, 4) + z.P * 4
    if setup.bf16:
        terms["attention probabilities, bf16 copy"] = z.P * 2
    return terms


def _ffn_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """The FFN activation's kept tensors, and its output when the next linear trains (reads it)."""
    z = _Sizes(encoder, setup)
    T, F, e = z.T, z.F, z.e
    keeps = encoder.activation_keeps
    terms = {
        "FFN activation input" if keeps == 1 else f"FFN activation: the {keeps} tensors it keeps": keeps
        * T
        * F
        * e
    }
    if setup.adapters is None and not encoder.activation_keeps_output:
        terms["FFN activation output (next linear's input)"] = T * F * e
    return terms


def _ffn_and_linear_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """The rest of a post-norm layer (BERT-like and DeBERTa): the FFN, the linear layers' inputs when
    their weights train, the LoRA adapters' and the bf16 weight copies' terms."""
    terms = _ffn_terms(encoder, setup)
    if setup.adapters is None:
        terms.update(_linear_input_terms(encoder, setup))
    terms.update(_lora_terms(encoder, setup))
    terms.update(_bf16_weight_terms(encoder, setup))
    return terms


def _linear_input_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """Full fine-tuning: the inputs of the linears that read the fp32 stream (attention, FFN), kept
    for their weight gradients. The LayerNorm outputs, or under autocast one bf16 copy per linear."""
    T, H = setup.batch_size * setup.seq_length, encoder.hidden
    if setup.bf16:
        # Each linear keeps its own bf16 copy of its input: Q, K, V share one fp32 input, the
        # FFN's first linear takes the attention block's LayerNorm output.
        linears = len(set(encoder.family.qkv)) + 1
        return {"linear inputs, bf16 copies": linears * T * H * 2}
    return {"LayerNorm outputs (next linears' input)": 2 * T * H * 4}


def _bf16_weight_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    if setup.bf16 and not setup.shape.quantized_base:
        # Autocast's bf16 copy of every linear weight, kept for the input gradient. A quantized
        # base's NF4 weights are dequantized again in backward instead.
        return {"linear weights, bf16 copies": 2 * _linear_weight_elements(encoder)}
    return {}


def _lora_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """What the adapters of one layer keep: each its dropout mask and dropped input (or, without LoRA
    dropout, the input it shares with its frozen linear) and its T x r down-projection."""
    lora = setup.adapters
    if lora is None or not encoder.adapters:
        return {}
    z = _Sizes(encoder, setup)
    T = z.T
    terms = {}
    adapters = encoder.adapters
    if lora.dropout > 0:
        terms["LoRA dropout masks + inputs"] = sum(
            z.mask(T * a.inputs, 4) + T * a.inputs * (2 if setup.bf16 else 4) for a in adapters
        )
    elif setup.bf16:  # each adapter's own bf16 copy of its input
        terms["LoRA inputs"] = sum(T * a.inputs * 2 for a in adapters)
    else:  # the frozen linear's input, kept for the adapter: once per input (Q, K, V share theirs)
        qkv = [a for a in adapters if a.role == "qkv"]
        terms["LoRA inputs"] = (T * qkv[0].inputs * 4 if qkv else 0) + sum(
            T * a.inputs * 4 for a in adapters if a.role != "qkv"
        )
    terms["LoRA down-projections (T x r)"] = sum(T * lora.r * z.e for _ in adapters)
    return terms


def _deberta_layer_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """DeBERTa's (v1) and DeBERTa-v2/v3's layer: BERT's, with disentangled attention.

    The content scores Q K^T get two more: content-to-position, Q against the projected relative
    position embeddings (a table of 2k rows, k = the span: min(S, max_relative_positions), or the
    position buckets of v2/v3), and position-to-content, K against them. Each is a B x A x S x 2k
    matmul output that torch.gather keeps to pick S of its 2k columns, and each matmul keeps the
    projected table expanded to the batch (B x 2k x H). The table itself goes through dropout in
    every layer. v1 copies Q and K once more for those matmuls, and writes LayerNorm as separate ops.
    """
    z = _Sizes(encoder, setup)
    B, S, T, H, A, e = z.B, z.S, z.T, z.H, z.A, z.e
    frozen_base = setup.adapters is not None
    relative = encoder.relative
    v1 = encoder.family.layer_norm_ops
    layer: dict[str, int] = {"Q and K copies (content scores)": 2 * T * H * e}
    if relative is not None:
        k = relative.span(S)
        rows = relative.table_rows
        terms = int(relative.c2p) + int(relative.p2c)
        if not frozen_base:
            # c2p keeps Q for the projected positions' gradient (v1 copies it again), p2c keeps K.
            copies = (int(relative.c2p) if v1 else 0) + int(relative.p2c)
        else:
            # Frozen position projections need no gradient, unless they are the adapted query and
            # key projections themselves (v2/v3 share them): then p2c keeps K (c2p's Q is the one
            # the content scores keep).
            adapted = encoder.adapted_projections if not relative.separate_projections else set()
            copies = int(relative.p2c and "query" in adapted)
        if copies:
            layer["Q / K kept for the relative scores"] = copies * T * H * e
        layer["projected positions, expanded to the batch"] = terms * B * 2 * k * H * e
        layer["c2p / p2c scores kept by gather (S x 2k)"] = terms * B * A * S * 2 * k * e
        layer["c2p / p2c position indices"] = terms * S * S * 8
        if not frozen_base and encoder.hidden_dropout > 0:
            layer["position table: dropout mask + output"] = z.mask(rows * H, 4) + rows * H * 4
        if frozen_base and not relative.separate_projections:
            # The query and key adapters also project the table: their input and down-projection.
            shared = [a for a in encoder.adapters if a.projections & {"query", "key"}]
            if shared:
                layer["LoRA on the position table"] = len(shared) * rows * (H + setup.adapters.r) * 4
    layer["attention mask (bool)"] = B * S * S
    layer.update(_probability_terms(encoder, setup))
    layer["V copy"] = T * H * e
    if not frozen_base:
        layer["context (output projection input)"] = T * H * e
    if encoder.hidden_dropout > 0:
        layer["dropout masks on the hidden states"] = encoder.family.hidden_dropouts * z.mask(T * H, e)
    if v1:
        # x - mean twice and sqrt(var + eps); and the normalized output when the weight trains.
        kept = 2 if frozen_base else 3
        layer[f"LayerNorm as ops: {kept} x T x H and sqrt(var)"] = 2 * (kept * T * H * 4 + T * 4)
    else:
        layer["residual sums kept by LayerNorm"] = 2 * T * H * 4
        layer["LayerNorm mean and rstd"] = 2 * 2 * T * 4
    layer.update(_ffn_and_linear_terms(encoder, setup))
    return layer


def _modernbert_layer_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """ModernBERT's layer: pre-norm (LayerNorm before attention and before the FFN; none before the
    first layer's attention), fused QKV projection with rotary positions, and a gated FFN:
    Wi projects to 2F, GELU of one half times the other, Wo back to H."""
    z = _Sizes(encoder, setup)
    B, S, T, H, F, e = z.B, z.S, z.T, z.H, z.F, z.e
    frozen_base = setup.adapters is not None
    layer: dict[str, int] = {
        "LayerNorm inputs (the residual stream) + stats": 2 * (T * H * 4 + 2 * T * 4),
    }
    if not frozen_base:
        layer["LayerNorm outputs (Wqkv's and Wi's input)"] = 2 * T * H * e
    if _fused_attention(encoder, setup):
        # Q, K, V are views of Wqkv's output (3 T x H), which SDPA keeps for V; Q and K are rotated
        # copies. Its output is Wo's input.
        layer["Wqkv output, rotated Q and K"] = 5 * T * H * e
        layer["attention output"] = T * H * e
        layer["attention log-sum-exp"] = B * z.A * S * 4
    else:  # eager, or the math kernel (attention dropout on CPU): copies of Q, K, V
        layer["Q, K, V contiguous copies"] = 3 * T * H * e
        layer.update(_probability_terms(encoder, setup))
        if not frozen_base:
            layer["context (Wo's input)"] = T * H * e
    if encoder.attention_dropout > 0:
        layer["attention output dropout mask"] = z.mask(T * H, e)
    layer["Wi output (2F: GELU's input and the gate)"] = 2 * T * F * e
    layer["GELU output (the gate's factor)"] = max(encoder.activation_keeps, 1) * T * F * e
    if encoder.hidden_dropout > 0:
        layer["FFN dropout mask"] = z.mask(T * F, e)
    if not frozen_base:
        layer["gated product (Wo's input)"] = T * F * e
    layer.update(_lora_terms(encoder, setup))
    layer.update(_bf16_weight_terms(encoder, setup))
    return layer


def activation_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """Bytes of what forward keeps for backward, and the backward transient, by name."""
    L, T, H = encoder.layers, setup.batch_size * setup.seq_length, encoder.hidden
    fused = _fused_attention(encoder, setup)
    frozen_base = setup.adapters is not None
    terms: dict[str, int] = {}
    per_layer = sum(layer_activation_terms(encoder, setup).values())
    transient = _backward_transient(encoder, setup, fused)
    if setup.gradient_checkpointing:
        # Only each layer's input is kept; backward recomputes one layer at a time.
        terms["layer inputs kept by checkpointing"] = L * T * H * 4
        terms["one layer recomputed"] = per_layer
        terms["backward transient"] = transient - T * H * 4
        terms.update(_embedding_terms(encoder, setup, trainable=True))
    else:
        terms["encoder layers"] = L * per_layer
        first = _first_layer_difference(encoder, setup, fused)
        if first:
            terms["first layer (no gradient into the embeddings)" if frozen_base else "first layer"] = -first
        terms["backward transient"] = transient
        terms.update(_embedding_terms(encoder, setup, trainable=not frozen_base))
    terms.update(_encoder_terms(encoder, setup))
    terms.update(_head_terms(encoder, setup))
    return terms


def _linear_weight_elements(encoder: Encoder) -> int:
    H, F = encoder.hidden, encoder.intermediate
    return encoder.layer_linear_weights or 4 * H * H + 2 * H * F


def _embedding_terms(encoder: Encoder, setup: Setup, trainable: bool) -> dict[str, int]:
    if not trainable:
        return {}  # frozen embeddings: nothing there needs a gradient
    z = _Sizes(encoder, setup)
    T, H, E = z.T, z.H, z.E
    if encoder.family.layer_norm_ops:
        terms = {"embeddings: LayerNorm as ops": 3 * T * E * 4 + T * 4}
    else:
        terms = {"embeddings: LayerNorm input + stats": T * E * 4 + 2 * T * 4}
    if encoder.family.layer == "deberta":
        terms["embeddings: padding mask, float"] = T * 4  # the LayerNorm output is multiplied by it
    if encoder.family.embedding_indices:
        terms["embeddings: position (and token type) ids, int64"] = encoder.family.embedding_indices * T * 8
    if encoder.embedding_drop > 0:
        terms["embeddings: dropout mask"] = z.mask(T * E, 4)
    if E != H:  # ALBERT and ELECTRA project the narrower embeddings up to the hidden size
        terms["embeddings: projection input"] = T * E * (2 if setup.bf16 else 4)
    if not setup.bf16 and encoder.family.layer != "modernbert":
        # Under autocast the first layer's linears keep bf16 copies instead; ModernBERT's first
        # layer counts its Wqkv input itself.
        terms["embeddings: output (first layer's input)"] = T * H * 4
    return terms


def _encoder_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """What the encoder keeps once per forward, outside its layers."""
    z = _Sizes(encoder, setup)
    terms = {}
    relative = encoder.relative
    if relative is not None and relative.table_norm:
        rows = relative.table_rows
        terms["position table LayerNorm: stats"] = 2 * rows * 4
        if encoder.hidden_dropout == 0:
            terms["position table, normalized"] = rows * z.H * 4
    if encoder.family.relative_bias and setup.adapters is None:
        terms["relative position bucket ids, int64"] = z.S * z.S * 8
    if encoder.family.layer == "modernbert":
        # Sliding-window layers always get a mask, the global ones only for padded batches; the
        # fused kernel makes each float.
        masked = encoder.sliding_layers + (encoder.layers - encoder.sliding_layers if setup.padded else 0)
        if _fused_attention(encoder, setup) and masked:
            terms["attention masks, float"] = masked * z.B * z.S * z.S * z.e
        terms["rotary cos and sin"] = encoder.layers * 2 * z.S * (z.H // z.A) * z.e
        terms["final LayerNorm input + stats"] = z.T * z.H * 4 + 2 * z.T * 4
    if not setup.bf16 and not setup.gradient_checkpointing:
        # The last hidden states stay whole when the head's first linear trains on a view of their
        # first token. BERT's and DeBERTa's layers count them already (as the next layer's input)
        # under full fine-tuning. (A head that drops out first, RoBERTa's, keeps none of them, but
        # the peak comes before they go: at the last LayerNorm, with them just made.)
        counted = encoder.family.layer != "modernbert" and setup.adapters is None
        if encoder.family.head_reads_a_view and encoder.head_trains and not counted:
            terms["last hidden states (kept by the trained head)"] = z.T * z.H * 4
    return terms


def _head_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    # The pooler's and classifier's tensors: batch x hidden each (FamilyForward.head).
    B, H = setup.batch_size, encoder.hidden
    e = 2 if setup.bf16 else 4
    always, with_dropout = encoder.family.head
    pieces = always + (with_dropout if encoder.classifier_dropout > 0 else 0)
    return {"pooler and classifier": pieces * B * H * e}


def _first_layer_difference(encoder: Encoder, setup: Setup, fused: bool) -> int:
    """What the first layer keeps less than the others.

    Adapters: the first layer's input needs no gradient. ModernBERT: its first layer has no
    LayerNorm before the attention.
    """
    T, H = setup.batch_size * setup.seq_length, encoder.hidden
    e = 2 if setup.bf16 else 4
    savings = 0
    if encoder.family.layer == "modernbert":
        savings += T * H * 4 + 2 * T * 4
    if setup.adapters is None:
        return savings
    adapted = encoder.adapted_projections
    if encoder.family.layer != "modernbert" and not fused and adapted and "key" not in adapted:
        savings += T * H * e  # K needs no gradient there, so the copy of Q its gradient would use is not kept
        relative = encoder.relative
        if relative is not None and relative.p2c:
            # Nor does p2c keep the projected positions for K's gradient.
            savings += setup.batch_size * 2 * relative.span(setup.seq_length) * H * e
    if setup.adapters.dropout > 0:  # dropout masks of the adapters that read the layer's input
        savings += sum(
            T * a.inputs * (1 if setup.device == "cuda" else 4) for a in encoder.adapters if a.role == "qkv"
        )
    return savings


def _backward_transient(encoder: Encoder, setup: Setup, fused: bool) -> int:
    """What the top layer's backward adds on top of everything forward kept, at its highest.

    The FFN moment: the gradient of the GELU output (T x F) appears while the layer's saved
    tensors are still there (full fine-tuning frees the GELU output it kept for the weight
    gradient at the same time; LoRA kept none, so it also holds the GELU input's gradient).
    The attention moment (eager or math kernel only): the gradients of the probabilities
    (B x A x S x S, one or two of them) after the FFN's saved tensors are gone. A quantized base
    adds a moment of its own, when a 4-bit weight is dequantized (for small batches the largest).
    Fitted to the measured CPU order of frees (tests/test_planner.py checks it). Other families
    hold more or less at those moments (`_family_transient`).
    """
    T, H, F = setup.batch_size * setup.seq_length, encoder.hidden, encoder.intermediate
    e = 2 if setup.bf16 else 4
    if encoder.family.layer == "modernbert":
        # The gated FFN's backward: the gradients of Wi's 2F-wide output (LoRA: and of the gate's
        # product) while the layer's saved tensors are there. Measured on CPU.
        return (2 if setup.adapters is not None else 1) * T * F * e + T * H * 4
    return _bert_transient(encoder, setup, fused) + _family_transient(encoder, setup)


def _bert_transient(encoder: Encoder, setup: Setup, fused: bool) -> int:
    B, S, H, F, A = setup.batch_size, setup.seq_length, encoder.hidden, encoder.intermediate, encoder.heads
    T = B * S
    e = 2 if setup.bf16 else 4
    probabilities = B * A * S * S * 4
    copies_of_probabilities = 1 if encoder.attention_dropout > 0 else 2
    if setup.adapters is not None:
        ffn = 2 * T * F * e + T * H * 4 + 4 * T * setup.adapters.r * e
        attention = copies_of_probabilities * probabilities - T * F * e - T * H * 4
        if setup.shape.quantized_base:
            # The input gradient of an NF4 linear needs its weight back: bitsandbytes dequantizes
            # the largest one (H x F) to fp32 and copies it to bf16, 6 B per weight, for a moment.
            ffn = max(ffn, 6 * H * F - T * H * 2)
    else:
        ffn = T * F * e - T * H * 4
        attention = copies_of_probabilities * probabilities - 2 * T * F * e - 4 * T * H * 4
    return max(ffn, 0 if fused else attention)


def _family_transient(encoder: Encoder, setup: Setup) -> int:
    """What a family holds at BERT's highest moment beyond BERT (0 for BERT itself), measured on CPU.

    The highest moment is often the end of forward, at the last LayerNorm, when what the forward
    made once (masks, position tables) is still there and the last layer's own outputs are being
    made; under LoRA the frozen layer's outputs, kept by no one, are still referenced there.
    """
    B, S, T, H, F = (
        setup.batch_size,
        setup.seq_length,
        setup.batch_size * setup.seq_length,
        encoder.hidden,
        encoder.intermediate,
    )
    e = 2 if setup.bf16 else 4
    family = encoder.family
    lora = setup.adapters is not None
    extra = 0
    if encoder.activation_keeps > 1 and not lora:
        extra += T * F * e  # an activation written as ops (ALBERT's gelu_new) makes a gradient per op
    if lora:
        # Fewer dropouts on the hidden states (DistilBERT) and a ReLU, whose output the frozen
        # layer keeps anyway, leave less of the last layer referenced at the end of forward.
        extra -= max(0, 2 - family.hidden_dropouts) * T * H * 4
        if encoder.activation_keeps_output:
            extra -= T * F * e
    if family.relative_bias:  # MPNet: the position bias of the whole forward, and a float padding mask
        extra += B * encoder.heads * S * S * 4 + (3 * B * S * S if setup.padded else 0)
    if family.layer == "deberta":
        # DeBERTa: an int64 attention mask (B x S x S) and the relative positions (S x S), made once
        # per forward; v1's LayerNorm, written as ops, has two more T x H temporaries.
        extra += B * S * S * 8 + S * S * 8 + (2 * T * H * 4 if family.layer_norm_ops else 0)
    return extra


# --- the plan --------------------------------------------------------------------------------------


@dataclass
class MemoryPlan:
    model: str
    setup: Setup
    params_total: int
    params_trainable: int
    weights: int
    gradients: int
    optimizer_state: int
    activations: int
    other: int
    activation_terms: dict[str, int]
    config: Any = None  # the model config the plan was made from
    encoder: Encoder | None = None  # what the activation arithmetic read from it

    @property
    def cuda_overhead(self) -> int:
        return int(self.setup.cuda_overhead_gib * GIB) if self.setup.device == "cuda" else 0

    @property
    def tensor_bytes(self) -> int:
        """Weights + gradients + optimizer state + activations: what tests/test_planner.py checks."""
        return self.weights + self.gradients + self.optimizer_state + self.activations

    @property
    def peak_tensors(self) -> int:
        """All tensors at once, at the highest moment: what torch.cuda.max_memory_allocated shows.

        The Trainer frees the gradients after each optimizer step (zero_grad sets them to None), so
        they build up in backward as the activations go: the peak holds the larger of the two.
        With gradient accumulation the gradients stay between micro-batches and meet the activations.
        """
        if self.setup.gradient_accumulation_steps > 1:
            transient = self.activations + self.gradients
        else:
            transient = max(self.activations, self.gradients)
        return self.weights + self.optimizer_state + transient + self.other

    @property
    def sum_of_parts(self) -> int:
        """Every part at its own peak, added up: an upper bound of the peak."""
        return self.tensor_bytes + self.other + self.cuda_overhead

    @property
    def total(self) -> int:
        """The predicted peak on the device: all tensors at once plus the CUDA context."""
        return self.peak_tensors + self.cuda_overhead

    def breakdown_gib(self) -> dict[str, float]:
        """The parts under results.json's memory_breakdown_gib keys, the CUDA context and the peak."""
        parts = {key: getattr(self, key) for key in BREAKDOWN_KEYS}
        parts.update(cuda_overhead=self.cuda_overhead, total=self.total)
        return {key: value / GIB for key, value in parts.items()}


def check_shape(shape: TrainingShape) -> None:
    """Refuse a shape the arithmetic has no answer for, naming the value."""
    for name in ("optimizer_bits", "embedding_optimizer_bits"):
        if getattr(shape, name) not in (8, 32):
            raise ConfigError(
                f"{name} is {getattr(shape, name)}; the planner knows 32-bit and 8-bit AdamW state."
            )
    lora = shape.adapters
    if lora is not None and (lora.r <= 0 or not 0 <= lora.dropout < 1 or not lora.target_modules):
        raise ConfigError(
            f"The adapters {lora} need a positive r, a dropout in [0, 1) and at least one target module."
        )


def plan_memory(
    config, setup: Setup, model_name: str = "", parameters: Parameters | None = None
) -> MemoryPlan:
    check_shape(setup.shape)
    if setup.sharding not in SHARDED_PARTS or setup.num_processes < 1:
        raise ValueError(
            f"sharding must be one of {', '.join(SHARDED_PARTS)} (not {setup.sharding!r}) and "
            f"num_processes at least 1 (not {setup.num_processes})"
        )
    if setup.adapters is not None:  # "auto": the family's own targets, so the plan says what it planned
        from recipes_lib.modeling.adapters import resolve_lora_targets

        lora = resolve_lora_targets(setup.adapters, config.model_type)
        setup = replace(setup, shape=replace(setup.shape, adapters=lora))
    encoder = Encoder.from_config(config, setup.adapters)
    if setup.gradient_checkpointing and not encoder.checkpointing:
        raise ModelError(
            f"{type(config).__name__.removesuffix('Config')} models do not support activation checkpointing "
            "in transformers; plan without --gradient_checkpointing."
        )
    parameters = parameters or count_parameters_on_meta(config, setup.shape)
    terms = activation_terms(encoder, setup)
    parts = {
        "weights": weight_bytes(parameters, setup),
        "gradients": gradient_bytes(parameters),
        "optimizer_state": optimizer_bytes(parameters, setup),
    }
    for part in setup.sharded_parts:
        parts[part] = math.ceil(parts[part] / setup.num_processes)
    if "weights" in setup.sharded_parts:
        parts["weights"] += _gathered_layer_bytes(encoder, parameters, setup)
    return MemoryPlan(
        model=model_name or getattr(config, "_name_or_path", "") or encoder.model_type,
        setup=setup,
        params_total=parameters.total,
        params_trainable=parameters.trainable,
        **parts,
        activations=sum(terms.values()),
        other=input_bytes(setup, encoder),
        activation_terms=terms,
        config=config,
        encoder=encoder,
    )


def _gathered_layer_bytes(encoder: Encoder, parameters: Parameters, setup: Setup) -> int:
    """One encoder layer's full weights, gathered for compute when the weights are sharded.

    Counted on the meta model's first layer; BERT's: Q, K, V and output projections 4 (H x H + H),
    FFN H x F + F + F x H + H, two LayerNorms 2 x 2H (bert-base: 7,087,872 parameters). Bytes per
    weight: the model's average (NF4 for a quantized base), at most 2 under bf16 mixed precision,
    which gathers in bf16.
    """
    H, F = encoder.hidden, encoder.intermediate
    layer_parameters = encoder.layer_parameters or 4 * (H * H + H) + 2 * H * F + F + H + 4 * H
    bytes_per_weight = (weight_bytes(parameters, setup) - parameters.buffer_bytes) / parameters.total
    if setup.bf16:
        bytes_per_weight = min(bytes_per_weight, 2)
    return math.ceil(layer_parameters * bytes_per_weight)


def largest_batch(config, setup: Setup, budget_bytes: int, limit: int = 4096) -> int:
    """The largest per-device batch whose predicted peak fits the budget (0: not even batch 1).

    Every part but the activations is fixed, and the activations grow with the batch, so
    doubling then bisecting finds the edge in a few dozen evaluations of the arithmetic.
    """
    parameters = count_parameters_on_meta(config, setup.shape)

    def fits(batch: int) -> bool:
        return (
            plan_memory(config, replace(setup, batch_size=batch), parameters=parameters).total <= budget_bytes
        )

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


# --- loading a config without weights ------------------------------------------------------------------


def load_config(name_or_path: str, num_labels: int = 2):
    """A model config from a local directory, a config.json, the Hub cache, or the published values.

    Nothing but config.json is read, so no weights are downloaded; offline, a Hub name works when
    its config is cached, is pip-installed (MiniLM), or is one of KNOWN_CONFIGS.
    """
    return load_config_and_source(name_or_path, num_labels)[0]


def load_config_and_source(name_or_path: str, num_labels: int = 2) -> tuple[Any, str]:
    """(config, where it came from, in words)."""
    from transformers import AutoConfig, BertConfig

    from recipes_lib.modeling.loading import resolve_model_path

    path = Path(name_or_path)
    if path.is_file():
        values = json.loads(path.read_text())
        for key in ("num_labels", "id2label", "label2id"):
            values.pop(key, None)
        config = AutoConfig.for_model(values.pop("model_type", "bert"), **values, num_labels=num_labels)
        return config, f"config file {path}"
    # A name with published values needs no network: the cached config if there is one, else those.
    known = name_or_path in KNOWN_CONFIGS
    try:
        resolved = resolve_model_path(name_or_path)
        config = AutoConfig.from_pretrained(resolved, num_labels=num_labels, local_files_only=known)
        return config, ("local directory " + str(resolved)) if Path(
            resolved
        ).is_dir() else "Hugging Face Hub (config.json only)"
    except (OSError, ValueError) as error:
        if known:
            config = BertConfig(**KNOWN_CONFIGS[name_or_path], num_labels=num_labels)
            return config, "built-in copy of its published config.json (not in the local cache)"
        names = ", ".join(name for name in KNOWN_CONFIGS if "/" not in name)
        raise ModelError(
            f"No config for '{name_or_path}': {str(error).strip().splitlines()[0]}. Pass a local directory or "
            f"config.json (no weights needed), or one of the built-in configs: {names}."
        ) from None


@dataclass
class PlanRow:
    """One (model, recipe) of `plan_models`: the plan and the largest batch that fits, or why there is none."""

    model: str
    label: str
    source: str = ""  # where the model's config came from, in words
    plan: MemoryPlan | None = None
    max_batch: int = 0
    error: str | None = None  # set when there is no plan


def error_reason(error: Exception) -> str:
    """An error as one line: a RecipeError's message is written for the user; anything else is named."""
    text = str(error).strip()
    if isinstance(error, RecipeError):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


# What plan_models and the CLI report as a reason a row has no plan rather than stop on: errors the
# user can fix (RecipeError) and transformers' or peft's ValueError for a model or target they lack.
PLANNING_ERRORS = (RecipeError, ValueError)


def plan_models(
    models: Iterable[str],
    shapes: Mapping[str, TrainingShape | Exception],
    setup: Setup,
    budget_gib: float,
    num_labels: int = 2,
) -> list[PlanRow]:
    """A plan and the largest batch that fits, for every model and every {label: shape}.

    Every row that can be planned is; one that cannot says why in its `error`: a config that does
    not load, a model the planner does not know, adapters that name no layer of the model, or a
    shape that could not be made (given as the exception that stopped it, e.g. a recipe's options
    that failed validation).
    """
    rows = []
    for model in models:
        try:
            config, source = load_config_and_source(model, num_labels)
        except PLANNING_ERRORS as error:
            rows += [PlanRow(model, label, error=error_reason(error)) for label in shapes]
            continue
        for label, shape in shapes.items():
            row = PlanRow(model, label, source)
            try:
                if isinstance(shape, Exception):
                    raise shape
                labelled = replace(setup, shape=shape, label=label)
                row.plan = plan_memory(config, labelled, model_name=model)
                row.max_batch = largest_batch(config, labelled, int(budget_gib * GIB))
            except PLANNING_ERRORS as error:
                row.plan, row.error = None, error_reason(error)
            rows.append(row)
    return rows


def largest_family_member(setup: Setup, budget_gib: float) -> tuple[str, MemoryPlan, int] | None:
    """The largest BERT_FAMILY configuration whose plan fits the budget at the setup's batch size."""
    from transformers import BertConfig

    best = None
    for name, values in BERT_FAMILY:
        config = BertConfig(**values, num_labels=2)
        plan = plan_memory(config, setup, model_name=name)
        if plan.total > budget_gib * GIB:
            break
        best = (name, plan, largest_batch(config, setup, int(budget_gib * GIB)))
    return best


def predict_for_check(model_dir: str, shape: TrainingShape, batch: int, seq: int, bf16: bool) -> float:
    """The predicted peak of all tensors, in GiB, for benchmarks/gpu_check.py's runs.

    Those runs pad every example to `seq` (no padding mask) and train on CUDA with bf16 (on the
    CPU without), and compare with torch.cuda.max_memory_allocated (CPU: the tracker's peak),
    which never includes the CUDA context, so neither does this figure.
    """
    device = "cuda" if bf16 else "cpu"
    setup = Setup(shape=shape, batch_size=batch, seq_length=seq, bf16=bf16, device=device, padded=False)
    return plan_memory(load_config(model_dir), setup).peak_tensors / GIB
