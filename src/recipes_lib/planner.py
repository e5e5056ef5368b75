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

tests/test_planner.py checks the prediction against the measured breakdown on CPU.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from recipes_lib.errors import ConfigError, ModelError, RecipeError
from recipes_lib.recipe_spec import LoraShape, TrainingShape
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
        """The attention projections (query, key, value) that carry adapters: the ones the
        activation arithmetic models ('all-linear' adapts all three, and the FFN too)."""
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
class Encoder:
    """The sizes of a BERT-like encoder that decide its activation memory."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    hidden_dropout: float
    attention_dropout: float
    classifier_dropout: float

    @classmethod
    def from_config(cls, config) -> Encoder:
        missing = [
            name
            for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
            if getattr(config, name, None) is None
        ]
        if missing:
            raise ModelError(
                f"The planner knows BERT-like encoders (BERT, RoBERTa, ELECTRA, MiniLM); this "
                f"{config.model_type} config has no {', '.join(missing)}. Use a BERT-like model."
            )
        hidden_dropout = float(getattr(config, "hidden_dropout_prob", 0.1) or 0.0)
        classifier_dropout = getattr(config, "classifier_dropout", None)
        return cls(
            model_type=config.model_type,
            hidden=config.hidden_size,
            layers=config.num_hidden_layers,
            heads=config.num_attention_heads,
            intermediate=config.intermediate_size,
            hidden_dropout=hidden_dropout,
            attention_dropout=float(getattr(config, "attention_probs_dropout_prob", 0.1) or 0.0),
            classifier_dropout=hidden_dropout if classifier_dropout is None else float(classifier_dropout),
        )


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
    number of parameters, packed).
    """
    import torch
    from torch import nn
    from transformers import AutoModelForSequenceClassification

    shape = shape or TrainingShape()
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    quantized = []
    if shape.quantized_base:
        # Every linear layer of the encoder in NF4 except what trains in full: the head, and the
        # pooler when the adapters train it. These are adapters.nf4_quantization_config's
        # llm_int8_skip_modules, which transformers matches as parts of the module name.
        keep = ["classifier", "score"]
        if shape.adapters is not None and shape.adapters.train_pooler:
            keep.append("pooler")
        quantized = [
            module.weight.numel()
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and not any(key in name for key in keep)
        ]
    if shape.adapters is not None:
        from recipes_lib.adapters import add_lora

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


def input_bytes(setup: Setup) -> int:
    # input_ids, token_type_ids, attention_mask (int64, batch x length) and the labels.
    return 3 * 8 * setup.batch_size * setup.seq_length + 8 * setup.batch_size


def _fused_attention(encoder: Encoder, setup: Setup) -> bool:
    """Whether the attention runs a fused kernel that never stores the S x S probabilities.

    SDPA on CUDA always does (flash or memory-efficient kernel, dropout included). On CPU PyTorch's
    fused kernel has no dropout, so training with attention dropout falls back to the math kernel,
    which stores what eager attention stores.
    """
    if setup.attention != "sdpa":
        return False
    return setup.device == "cuda" or encoder.attention_dropout == 0


def layer_activation_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """Bytes that one encoder layer's forward keeps for backward, by what they are."""
    B, S, H, F, A = setup.batch_size, setup.seq_length, encoder.hidden, encoder.intermediate, encoder.heads
    lora = setup.adapters
    T = B * S
    autocast = setup.bf16
    e = 2 if autocast else 4  # outputs of matmuls, GELU and attention
    e_softmax = 4  # softmax runs in fp32 under autocast
    fused = _fused_attention(encoder, setup)

    def mask(elements: int, element_bytes: int) -> int:
        # A CUDA dropout keeps a bool mask; a CPU dropout keeps the float noise it multiplied by.
        return elements * (1 if setup.device == "cuda" else element_bytes)

    hidden_drop, attention_drop = encoder.hidden_dropout > 0, encoder.attention_dropout > 0
    frozen_base = lora is not None

    # One encoder layer.
    layer: dict[str, int] = {}
    if fused:
        layer["attention Q, K, V, output"] = 4 * T * H * e
        layer["attention log-sum-exp"] = B * A * S * 4
        if setup.padded:
            layer["attention mask, float"] = B * S * S * e
    else:
        layer["Q, K, V contiguous copies"] = 3 * T * H * e
        probabilities = B * A * S * S
        layer["attention probabilities"] = probabilities * e_softmax
        if attention_drop:
            layer["attention dropout mask + output"] = (
                mask(probabilities, e_softmax) + probabilities * e_softmax
            )
        if autocast:
            layer["attention probabilities, bf16 copy"] = probabilities * 2
        if not frozen_base:
            layer["context (output projection input)"] = T * H * e
    if hidden_drop:
        layer["dropout masks after attention and FFN"] = 2 * mask(T * H, e)
    layer["residual sums kept by LayerNorm"] = 2 * T * H * 4
    layer["LayerNorm mean and rstd"] = 2 * 2 * T * 4
    layer["FFN GELU input"] = T * F * e
    if not frozen_base:
        layer["FFN GELU output"] = T * F * e
        if autocast:
            # Each linear keeps its own bf16 copy of its input: Q, K, V share one fp32 input, the
            # FFN's first linear takes the attention block's LayerNorm output.
            layer["linear inputs, bf16 copies"] = 4 * T * H * 2
        else:
            layer["LayerNorm outputs (next linears' input)"] = 2 * T * H * 4
    adapters = len(setup.adapted_attention)
    if adapters:
        # Each adapter's first linear keeps its input: its own dropout output (fp32), or its own
        # bf16 copy under autocast; without LoRA dropout in fp32, the shared LayerNorm output.
        lora_input = T * H * (2 if autocast else 4)
        if lora.dropout > 0:
            layer["LoRA dropout masks + inputs"] = adapters * (mask(T * H, 4) + lora_input)
        else:
            layer["LoRA inputs"] = adapters * lora_input if autocast else lora_input
        layer["LoRA down-projections (T x r)"] = adapters * T * lora.r * e
    if autocast and not setup.shape.quantized_base:
        # Autocast's bf16 copy of every linear weight, kept for the input gradient. A quantized
        # base's NF4 weights are dequantized again in backward instead.
        layer["linear weights, bf16 copies"] = 2 * _linear_weight_elements(encoder)
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
        if frozen_base:
            terms["first layer (no gradient into the embeddings)"] = -_first_layer_savings(
                encoder, setup, fused
            )
        terms["backward transient"] = transient
        terms.update(_embedding_terms(encoder, setup, trainable=not frozen_base))
    terms.update(_head_terms(encoder, setup))
    return terms


def _linear_weight_elements(encoder: Encoder) -> int:
    H, F = encoder.hidden, encoder.intermediate
    return 4 * H * H + 2 * H * F


def _embedding_terms(encoder: Encoder, setup: Setup, trainable: bool) -> dict[str, int]:
    if not trainable:
        return {}  # frozen embeddings: nothing there needs a gradient
    T, H = setup.batch_size * setup.seq_length, encoder.hidden
    terms = {"embeddings: LayerNorm input + stats": T * H * 4 + 2 * T * 4}
    if encoder.hidden_dropout > 0:
        terms["embeddings: dropout mask"] = T * H * (1 if setup.device == "cuda" else 4)
    if not setup.bf16:  # under autocast the first layer's linears keep bf16 copies instead
        terms["embeddings: output (first layer's input)"] = T * H * 4
    return terms


def _head_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    # Pooler tanh output, classifier dropout mask and output: batch x hidden each.
    B, H = setup.batch_size, encoder.hidden
    e = 2 if setup.bf16 else 4
    pieces = 1 + (2 if encoder.classifier_dropout > 0 else 0)
    return {"pooler and classifier": pieces * B * H * e}


def _first_layer_savings(encoder: Encoder, setup: Setup, fused: bool) -> int:
    """Adapters: the first layer's input needs no gradient, so it keeps less than the others."""
    T, H = setup.batch_size * setup.seq_length, encoder.hidden
    e = 2 if setup.bf16 else 4
    savings = 0
    if not fused and "key" not in setup.adapted_attention:
        savings += T * H * e  # K needs no gradient there, so the copy of Q its gradient would use is not kept
    adapters = len(setup.adapted_attention)
    if setup.adapters.dropout > 0:
        savings += adapters * T * H * (1 if setup.device == "cuda" else 4)  # dropout masks of the adapters
    return savings


def _backward_transient(encoder: Encoder, setup: Setup, fused: bool) -> int:
    """What the top layer's backward adds on top of everything forward kept, at its highest.

    The FFN moment: the gradient of the GELU output (T x F) appears while the layer's saved
    tensors are still there (full fine-tuning frees the GELU output it kept for the weight
    gradient at the same time; LoRA kept none, so it also holds the GELU input's gradient).
    The attention moment (eager or math kernel only): the gradients of the probabilities
    (B x A x S x S, one or two of them) after the FFN's saved tensors are gone. A quantized base
    adds a moment of its own, when a 4-bit weight is dequantized (for small batches the largest).
    Fitted to the measured CPU order of frees (tests/test_planner.py checks it).
    """
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
    encoder = Encoder.from_config(config)
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
        other=input_bytes(setup),
        activation_terms=terms,
        config=config,
    )


def _gathered_layer_bytes(encoder: Encoder, parameters: Parameters, setup: Setup) -> int:
    """One encoder layer's full weights, gathered for compute when the weights are sharded.

    Per layer: Q, K, V and output projections 4 (H x H + H), FFN H x F + F + F x H + H, two
    LayerNorms 2 x 2H (bert-base: 7,087,872 parameters). Bytes per weight: the model's average
    (NF4 for a quantized base), at most 2 under bf16 mixed precision, which gathers in bf16.
    """
    H, F = encoder.hidden, encoder.intermediate
    layer_parameters = 4 * (H * H + H) + 2 * H * F + F + H + 4 * H
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

    from recipes_lib.modeling import resolve_model_path

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
        return config, ("local directory " + resolved) if Path(
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
