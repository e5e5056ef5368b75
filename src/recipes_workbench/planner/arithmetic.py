"""The byte arithmetic: what each part of a training step's memory holds, from an Encoder and a Setup.

The parts are the five that results.json measures (memory/monitor.py); plan.py adds them up. Each
function's docstring gives its bytes; docs/planner.md ("What it counts") has the table of one layer's
activations, the letters it uses (T, H, F, A, e, m) and what adapters and checkpointing change. Each
layer kind has its function below (_post_norm_layer_terms, _modernbert_layer_terms, ...); what a family's
forward keeps beyond BERT's layer is its FamilyForward (forwards.py). tests/workbench/test_planner.py
and tests/workbench/test_planner_families.py check the prediction against measured steps on CPU.
"""

from __future__ import annotations

import math

from recipes_workbench.planner.encoder import Encoder
from recipes_workbench.planner.forwards import (
    DISENTANGLED,
    GATED_POST_NORM,
    GATED_ROTARY,
    PRE_NORM,
    RMS_GATED,
)
from recipes_workbench.planner.parameters import Parameters
from recipes_workbench.planner.setup import Setup

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


# --- weights, gradients, optimizer state, the input batch ------------------------------------------


def weight_bytes(parameters: Parameters, setup: Setup) -> int:
    """Parameters and buffers: 4 B per fp32 parameter (2 B under ZeRO-Offload's bf16 mode); each NF4
    weight with its block scales and constants; each int8 weight (base_bits 8) with its row scales."""
    float_bytes = 2 if setup.optimizer_offload and setup.half_precision else 4
    floats = float_bytes * (parameters.total - sum(parameters.quantized_linears))
    if setup.shape.base_bits == 8:
        # LLM.int8: int8 weights (CB) and one fp32 absmax per output row (SCB); nothing else kept.
        quantized = sum(parameters.quantized_linears) + 4 * sum(parameters.quantized_rows)
    else:
        quantized = sum(
            math.ceil(n / 2)
            + math.ceil(n / NF4_BLOCK)
            + 4 * math.ceil(n / NF4_BLOCK / NF4_SCALE_BLOCK)
            + NF4_CONSTANT_BYTES
            for n in parameters.quantized_linears
        )
    return floats + quantized + parameters.buffer_bytes


def gradient_bytes(parameters: Parameters) -> int:
    """One fp32 gradient per trainable parameter."""
    return 4 * parameters.trainable


# bitsandbytes pages an optimizer's state buffers (state1, state2) only for tensors of at least this
# many elements (Optimizer8bit.get_state_buffer); the absmax, the maps and smaller tensors' state stay
# in ordinary device memory.
PAGED_MIN_ELEMENTS = 100_000


def paged_optimizer_bytes(parameters: Parameters, setup: Setup) -> int:
    """The part of optimizer_bytes a paged optimizer (PagedAdamW8bit) keeps in CUDA unified memory:
    the two moments of every tensor of PAGED_MIN_ELEMENTS or more (2 x 1 B 8-bit, 2 x 4 B 32-bit).
    0 on CPU, where bitsandbytes 0.50 falls back to ordinary buffers ("Paged optimizers are not
    supported on CPU"), and without paging."""
    if not setup.shape.paged_optimizer or setup.device != "cuda":
        return 0
    total = 0
    for elements, is_embedding in parameters.trainable_tensors:
        if elements < PAGED_MIN_ELEMENTS:
            continue
        keep_32bit = setup.shape.optimizer_bits == 32 or (
            is_embedding and setup.shape.embedding_optimizer_bits == 32
        )
        total += 8 * elements if keep_32bit else 2 * elements
    return total


def offloaded_bytes(parameters: Parameters, setup: Setup) -> int:
    """CPU memory of DeepSpeed ZeRO-Offload (stage 2, offload_optimizer_device cpu), per process:
    DeepSpeedCPUAdam's fp32 master weights and two fp32 moments, and the fp32 gradients they step
    on (16 B per trainable parameter), and a pinned buffer of the largest trainable tensor's gradient
    in the weights' dtype. 0 without offload."""
    if not setup.optimizer_offload:
        return 0
    largest = max((elements for elements, _ in parameters.trainable_tensors), default=0)
    return 16 * parameters.trainable + (2 if setup.half_precision else 4) * largest


# DeepSpeed's default reduce_bucket_size (elements): accelerate_configs/deepspeed_zero2_offload.yaml
# leaves it unset, so the Trainer's "auto" (hidden_size^2) never applies.
DEEPSPEED_REDUCE_BUCKET = 500_000_000


def offload_gradient_bytes(parameters: Parameters, setup: Setup) -> int:
    """What DeepSpeed ZeRO-Offload keeps of the gradients on the GPU, in the weights' dtype: the
    largest trainable tensor's gradient as autograd makes it, DeepSpeed's GPU staging buffer of
    the same size (temp_grad_buffer_for_gpu_offload), and one reduce bucket of reduce_bucket_size
    elements (stage 2 without overlap_comm allocates one, whatever the model's size: 0.93 GiB in
    bf16). Every other gradient goes to the CPU as backward makes it."""
    largest = max((elements for elements, _ in parameters.trainable_tensors), default=0)
    return (2 if setup.half_precision else 4) * (2 * largest + DEEPSPEED_REDUCE_BUCKET)


def optimizer_bytes(parameters: Parameters, setup: Setup) -> int:
    """AdamW's state: two fp32 moments per trainable parameter and a step counter per tensor. 8-bit
    AdamW: two 1 B moments and their fp32 block absmax for tensors of MIN_8BIT_SIZE elements or more
    (embeddings only with embedding_optimizer_bits 8), fp32 moments for the rest, and its two maps."""
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


def input_bytes(setup: Setup, encoder: Encoder) -> int:
    """The input batch: input_ids, attention_mask and, where the family's tokenizer gives them,
    token_type_ids (int64, batch x length), and the labels."""
    tensors = 3 if encoder.family.token_type_ids else 2
    return tensors * 8 * setup.batch_size * setup.seq_length + 8 * setup.batch_size


def gathered_layer_bytes(encoder: Encoder, parameters: Parameters, setup: Setup) -> int:
    """One encoder layer's full weights (counted on the meta model's first layer; bert-base's: 7,087,872),
    gathered for compute when the weights are sharded, at the model's average bytes per weight (NF4
    for a quantized base), at most 2 under bf16 mixed precision, which gathers in bf16."""
    bytes_per_weight = (weight_bytes(parameters, setup) - parameters.buffer_bytes) / parameters.total
    if setup.half_precision:
        bytes_per_weight = min(bytes_per_weight, 2)
    return math.ceil(encoder.layer_parameters * bytes_per_weight)


# --- activations ------------------------------------------------------------------------------------


FLASH_ATTENTION = "flash_attention_2"


def attention_kernel(encoder: Encoder, setup: Setup) -> str:
    """The kernel the layers run: the one asked for if the class has it, else the next it has
    (flash_attention_2, then sdpa, then eager: DeBERTa and MPNet have eager only)."""
    if setup.attention == FLASH_ATTENTION and encoder.flash_attention:
        return FLASH_ATTENTION
    if setup.attention in (FLASH_ATTENTION, "sdpa") and encoder.sdpa:
        return "sdpa"
    return "eager"


def _flash(encoder: Encoder, setup: Setup) -> bool:
    """FlashAttention 2 (CUDA): the padding mask stays 2D (B x S: the kernel reads each row's length,
    its sliding window too), so no B x S x S mask is made, per layer or once per forward. Planned
    as a fused kernel without masks; not measured here (no GPU with flash-attn)."""
    return attention_kernel(encoder, setup) == FLASH_ATTENTION


def _fused_attention(encoder: Encoder, setup: Setup) -> bool:
    """Whether the attention runs a fused kernel that never stores the S x S probabilities.

    FlashAttention 2 and SDPA on CUDA always do (flash or memory-efficient kernel, dropout
    included). On CPU PyTorch's fused kernel has no dropout, so training with attention dropout
    falls back to the math kernel, which stores what eager attention stores. DeBERTa and MPNet have
    no SDPA path: always eager.
    """
    kernel = attention_kernel(encoder, setup)
    if kernel == "eager":
        return False
    return kernel == FLASH_ATTENTION or setup.device == "cuda" or encoder.attention_dropout == 0


class _Sizes:
    """The letters of the arithmetic for one setup: B, S, T = B x S tokens, H, F, A, E and e, the bytes
    of a matmul output (4 in fp32, 2 under bf16 autocast)."""

    def __init__(self, encoder: Encoder, setup: Setup):
        self.B, self.S = setup.batch_size, setup.seq_length
        self.H, self.F, self.A = encoder.hidden, encoder.intermediate, encoder.heads
        self.T = self.B * self.S
        self.E = encoder.embedding
        self.P = self.B * self.A * self.S * self.S  # attention probabilities
        self.e = 2 if setup.half_precision else 4
        self.cuda = setup.device == "cuda"

    def mask(self, elements: int, element_bytes: int) -> int:
        # A CUDA dropout keeps a bool mask; a CPU dropout keeps the float noise it multiplied by.
        return elements * (1 if self.cuda else element_bytes)


def layer_activation_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """Bytes that one encoder layer's forward keeps for backward, by what they are."""
    layer_terms = _LAYER_TERMS.get(encoder.family.layer, _post_norm_layer_terms)
    return {**layer_terms(encoder, setup), **_int8_base_terms(encoder, setup)}


def _int8_base_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """An 8-bit LLM.int8 base (base_bits 8) keeps each frozen linear's distinct input, in fp32 (MatMul8bitFp's
    ctx.A on CPU, MatMul8bitLt's ctx.tensors on CUDA, where autocast makes some bf16: an upper bound there):
    per token the attention input, the context unless a fused kernel keeps it, the FFN input (H each)
    and its hidden activation (F). docs/planner.md ("Memory techniques") says what was measured."""
    if not (setup.shape.quantized_base and setup.shape.base_bits == 8):
        return {}
    inputs = (2 if _fused_attention(encoder, setup) else 3) * encoder.hidden + encoder.intermediate
    return {"int8 linears' inputs (kept by bitsandbytes)": _Sizes(encoder, setup).T * inputs * 4}


def _dequantized_bytes_per_weight(setup: Setup) -> int:
    """Bytes per weight of a quantized linear's weight dequantized for its input gradient, for a moment:
    NF4 to fp32 then a bf16 copy (6 B); LLM.int8's int8 weights times their row scales, in fp32 (4 B)."""
    return 4 if setup.shape.base_bits == 8 else 6


def _separate_qkv_attention_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """Attention over separate Q, K, V projections (BERT's layer and EuroBERT's): a fused SDPA kernel
    keeps Q, K, V and its output, laid out as the output projection reads it (one tensor for both);
    eager attention keeps contiguous copies, the probabilities and, when it trains, the context."""
    z = _Sizes(encoder, setup)
    T, H, e = z.T, z.H, z.e
    if _fused_attention(encoder, setup):
        terms = {"attention Q, K, V, output": 4 * T * H * e, "attention log-sum-exp": z.B * z.A * z.S * 4}
        if setup.padded and not _flash(encoder, setup):
            terms["attention mask, float"] = z.B * z.S * z.S * e
        return terms
    terms = {"Q, K, V contiguous copies": 3 * T * H * e, **_probability_terms(encoder, setup)}
    if setup.adapters is None:
        terms["context (output projection input)"] = T * H * e
    return terms


def _post_norm_layer_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """BERT's layer, and RoBERTa's, XLM-R's, ELECTRA's, MPNet's, DistilBERT's, ALBERT's and DeBERTa's
    (its attention disentangled): attention and FFN, each followed by dropout, a residual sum and LayerNorm."""
    z = _Sizes(encoder, setup)
    T, H, e = z.T, z.H, z.e
    if encoder.family.layer == DISENTANGLED:
        layer = _disentangled_attention_terms(encoder, setup)
    else:
        layer = _separate_qkv_attention_terms(encoder, setup)
    if encoder.hidden_dropout > 0:
        layer["dropout masks on the hidden states"] = encoder.family.hidden_dropouts * z.mask(T * H, e)
    if encoder.family.layer_norm_ops:
        # DeBERTa v1: x - mean twice and sqrt(var + eps); and the normalized output when the weight trains.
        kept = 2 if setup.adapters is not None else 3
        layer[f"LayerNorm as ops: {kept} x T x H and sqrt(var)"] = 2 * (kept * T * H * 4 + T * 4)
    else:
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
    if setup.half_precision:
        terms[f"attention probabilities, {setup.precision} copy"] = z.P * 2
    return terms


# The tensors the tanh GELU written as ops keeps (encoder.what_activation_keeps): its input (pow's),
# tanh, 1 + tanh and x / 2. Of transformers' activations only gelu_new and gelu_accurate (the same
# formula, pow included) keep 4 (gelu_fast 7, quick_gelu 2, the others 1).
TANH_GELU_AS_OPS_KEEPS = 4


def _ffn_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """The FFN activation's kept tensors, and its output when the next linear trains (reads it)."""
    z = _Sizes(encoder, setup)
    T, F, e = z.T, z.F, z.e
    keeps = encoder.activation_keeps
    if encoder.family.layer == GATED_POST_NORM:
        return _gated_ffn_terms(encoder, setup)
    name = "FFN activation input" if keeps == 1 else f"FFN activation: the {keeps} tensors it keeps"
    terms = {name: keeps * T * F * e}
    if z.cuda and setup.half_precision and keeps == TANH_GELU_AS_OPS_KEEPS:
        # CUDA autocast runs pow in fp32 (CPU autocast does not), so ALBERT's gelu_new, written as ops,
        # keeps pow's input, tanh and 1 + tanh in fp32 there; only x / 2 in the autocast dtype (docs/planner.md,
        # "How good it is"; test_planner.py::test_cuda_autocast_keeps_albert_gelu_new_chain_in_fp32).
        terms["FFN activation: pow's chain kept in fp32 by CUDA autocast"] = (
            (TANH_GELU_AS_OPS_KEEPS - 1) * T * F * (4 - e)
        )
    if setup.adapters is None and not encoder.activation_keeps_output:
        terms["FFN activation output (next linear's input)"] = T * F * e
    return terms


def _gated_ffn_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """A gated FFN's kept tensors (GTE, NomicBERT, EuroBERT): activation(gate_proj(x)) x up_proj(x),
    then down_proj, with GTE's dropout on the product between."""
    z = _Sizes(encoder, setup)
    T, F, e = z.T, z.F, z.e
    terms = {
        "gate_proj output (the activation's input)": max(encoder.activation_keeps, 1) * T * F * e,
        "activation and up_proj outputs (the product's factors)": 2 * T * F * e,
    }
    if encoder.hidden_dropout > 0 and encoder.family.layer == GATED_POST_NORM:
        terms["FFN dropout mask"] = z.mask(T * F, e)
    if setup.adapters is None:
        terms["gated product (down_proj's input)"] = T * F * e
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
    z = _Sizes(encoder, setup)
    T, H = z.T, z.H
    if setup.half_precision:
        # Each linear keeps its own bf16 copy of its input: Q, K, V share one fp32 input, the
        # FFN's first linear takes the attention block's LayerNorm output.
        linears = len(set(encoder.family.qkv)) + 1
        return {f"linear inputs, {setup.precision} copies": linears * T * H * 2}
    return {"LayerNorm outputs (next linears' input)": 2 * T * H * 4}


def _bf16_weight_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    if setup.half_precision and not setup.shape.quantized_base:
        # Autocast's bf16 copy of every linear weight, kept for the input gradient. A quantized
        # base's NF4 weights are dequantized again in backward instead.
        return {f"linear weights, {setup.precision} copies": 2 * encoder.layer_linear_weights}
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
            z.mask(T * a.inputs, 4) + T * a.inputs * (2 if setup.half_precision else 4) for a in adapters
        )
    elif setup.half_precision:  # each adapter's own bf16 copy of its input
        terms["LoRA inputs"] = sum(T * a.inputs * 2 for a in adapters)
    else:  # the frozen linear's input, kept for the adapter: once per input (Q, K, V share theirs)
        qkv = [a for a in adapters if a.role == "qkv"]
        terms["LoRA inputs"] = (T * qkv[0].inputs * 4 if qkv else 0) + sum(
            T * a.inputs * 4 for a in adapters if a.role != "qkv"
        )
    terms["LoRA down-projections (T x r)"] = sum(T * lora.r * z.e for _ in adapters)
    return terms


def _disentangled_attention_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """DeBERTa's (v1) and DeBERTa-v2/v3's attention: BERT's, disentangled.

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
    return layer


def _modernbert_layer_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """ModernBERT's layer: pre-norm (LayerNorm before attention and before the FFN; none before the
    first layer's attention), fused QKV projection with rotary positions, and a gated FFN:
    Wi projects to 2F, GELU of one half times the other, Wo back to H."""
    z = _Sizes(encoder, setup)
    B, S, T, H, F, e = z.B, z.S, z.T, z.H, z.F, z.e
    frozen_base = setup.adapters is not None
    layer: dict[str, int] = {"LayerNorm inputs (the residual stream) + stats": 2 * (T * H * 4 + 2 * T * 4)}
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


def _rms_gated_layer_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """EuroBERT's layer (Llama's, bidirectional): RMSNorm before attention and before the FFN,
    written as ops (x.pow(2).mean keeps x; x * rsqrt keeps x and 1 / rms; weight * normalized keeps
    the normalized stream), rotary Q and K, SDPA, and a gated SiLU FFN; no dropout, no biases. Under
    LoRA the frozen norm weights keep no normalized stream and the frozen linears no input."""
    z = _Sizes(encoder, setup)
    T, H, e = z.T, z.H, z.e
    frozen_base = setup.adapters is not None
    layer: dict[str, int] = {"RMSNorm inputs (the residual stream) + 1 / rms": 2 * (T * H * 4 + T * 4)}
    if not frozen_base:
        layer["RMSNorm normalized streams and weighted outputs (q/k/v's and the FFN's input)"] = 2 * (
            T * H * 4 + T * H * e
        )
    layer.update(_separate_qkv_attention_terms(encoder, setup))
    layer.update(_gated_ffn_terms(encoder, setup))
    layer.update(_lora_terms(encoder, setup))
    layer.update(_bf16_weight_terms(encoder, setup))
    return layer


# The layer kinds with arithmetic of their own; every other kind is BERT's post-norm layer.
_LAYER_TERMS = {GATED_ROTARY: _modernbert_layer_terms, RMS_GATED: _rms_gated_layer_terms}


def activation_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """Bytes of what forward keeps for backward, and the backward transient, by name."""
    z = _Sizes(encoder, setup)
    L, T, H = encoder.layers, z.T, z.H
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
    if encoder.family.layer == GATED_ROTARY:
        terms.update(_modernbert_mask_building(encoder, setup, sum(terms.values())))
    return terms


def _embedding_terms(encoder: Encoder, setup: Setup, trainable: bool) -> dict[str, int]:
    if not trainable:
        return {}  # frozen embeddings: nothing there needs a gradient
    z = _Sizes(encoder, setup)
    T, H, E = z.T, z.H, z.E
    # XLM-R XL and EuroBERT: no LayerNorm on the embeddings
    pre_norm = encoder.family.layer in (PRE_NORM, RMS_GATED)
    if pre_norm:
        terms = {}
    elif encoder.family.layer_norm_ops:
        terms = {"embeddings: LayerNorm as ops": 3 * T * E * 4 + T * 4}
    else:
        terms = {"embeddings: LayerNorm input + stats": T * E * 4 + 2 * T * 4}
    if encoder.family.layer == DISENTANGLED:
        terms["embeddings: padding mask, float"] = T * 4  # the LayerNorm output is multiplied by it
    if encoder.family.embedding_indices:
        terms["embeddings: position (and token type) ids, int64"] = encoder.family.embedding_indices * T * 8
    if encoder.embedding_dropout > 0 and encoder.family.layer != RMS_GATED:  # EuroBERT: no dropout at all
        terms["embeddings: dropout mask"] = z.mask(T * E, 4)
    if E != H:  # ALBERT and ELECTRA project the narrower embeddings up to the hidden size
        terms["embeddings: projection input"] = T * E * (2 if setup.half_precision else 4)
    if not setup.half_precision and encoder.family.layer not in (GATED_ROTARY, PRE_NORM, RMS_GATED):
        # Under autocast the first layer's linears keep bf16 copies instead; a pre-norm first layer
        # counts its input itself (its LayerNorm keeps it), and ModernBERT's its Wqkv input.
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
    if encoder.family.layer == PRE_NORM:
        terms["final LayerNorm input + stats"] = z.T * z.H * 4 + 2 * z.T * 4
    if encoder.conv_weights:
        terms.update(_conv_terms(encoder, setup))
    if encoder.family.layer == GATED_ROTARY:
        terms.update(_modernbert_mask_terms(encoder, setup))
        terms["rotary cos and sin"] = encoder.layers * 2 * z.S * (z.H // z.A) * z.e
        terms["final LayerNorm input + stats"] = z.T * z.H * 4 + 2 * z.T * 4
    if encoder.family.layer in (GATED_POST_NORM, RMS_GATED):
        # One cos and one sin (1 x S x head_dim, fp32) for every layer; a padded batch's bidirectional
        # mask (bool, B x S x S), made once per forward and held to its end (each layer's SDPA keeps
        # its own float copy). Measured on CPU at 512 to 8,192 tokens (tests/workbench/test_planner_families.py).
        terms["rotary cos and sin"] = 2 * z.S * (z.H // z.A) * 4
        if setup.padded and not _flash(encoder, setup):
            terms["attention mask, bool (once per forward)"] = z.B * z.S * z.S
    if encoder.family.layer == RMS_GATED:
        # The final RMSNorm (its input, 1 / rms; the normalized stream when its weight trains) and
        # the late head on every token: dense's input, GELU's input, the classifier's input.
        terms["final RMSNorm input + 1 / rms"] = z.T * z.H * 4 + z.T * 4
        if setup.adapters is None:
            terms["final RMSNorm normalized stream"] = z.T * z.H * 4
        terms["late head: dense, GELU and classifier inputs (every token)"] = z.T * z.H * (4 + 2 * z.e)
    if not setup.half_precision and not setup.gradient_checkpointing:
        # The last hidden states stay whole when the head's first linear trains on a view of their
        # first token. BERT's and DeBERTa's layers count them already (as the next layer's input)
        # under full fine-tuning. (A head that drops out first, RoBERTa's, keeps none of them, but
        # the peak comes before they go: at the last LayerNorm, with them just made.)
        counted = encoder.family.layer != GATED_ROTARY and setup.adapters is None
        if encoder.family.head_reads_a_view and encoder.head_trains and not counted:
            terms["last hidden states (kept by the trained head)"] = z.T * z.H * 4
    return terms


def _modernbert_masks(encoder: Encoder, setup: Setup) -> tuple[bool, bool]:
    """(global, sliding): which of ModernBERT's two B x S x S bool masks its forward builds (once
    each, both every forward, held to its end). The global one only for a padded batch; the
    sliding-window one also unpadded, once the sequence reaches the window. None under
    FlashAttention 2, which reads the 2D padding mask and applies the window itself."""
    if _flash(encoder, setup):
        return False, False
    return setup.padded, setup.padded or setup.seq_length >= encoder.sliding_window


def _modernbert_mask_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """ModernBERT's attention masks (transformers 5.x masking_utils, measured on CPU at 512 to 8,192
    tokens, benchmarks/long_context.py): the bool global and sliding-window masks (`_modernbert_masks`)
    and the float copy of each layer's that SDPA makes (its query's dtype) and keeps for backward:
    every layer's under full fine-tuning, the recomputed layer's under checkpointing. Building the
    sliding-window mask is a moment of its own, early in forward (`_modernbert_mask_building`): with
    few layers at long sequences the step's highest (2 layers at 8,192 tokens: twice what they keep)."""
    z = _Sizes(encoder, setup)
    terms: dict[str, int] = {}
    global_mask, sliding_mask = _modernbert_masks(encoder, setup)
    masks = int(global_mask) + int(sliding_mask)
    if masks:
        terms["attention masks, bool (global, sliding window; once per forward)"] = masks * z.B * z.S * z.S
    if _fused_attention(encoder, setup) and not _flash(encoder, setup):
        float_masks = (
            encoder.sliding_layers * sliding_mask + (encoder.layers - encoder.sliding_layers) * global_mask
        )
        if setup.gradient_checkpointing:
            float_masks = min(float_masks, 1)
        if float_masks:
            terms["attention masks, float (kept by each layer's SDPA)"] = float_masks * z.B * z.S * z.S * z.e
    return terms


def _modernbert_mask_building(encoder: Encoder, setup: Setup, others: int) -> dict[str, int]:
    """What building the sliding-window mask holds beyond the step's other highest moment (`others`:
    every other activation term): the int64 |i - j| and its difference (1 x 1 x S x S each, 16 B an
    element whatever the batch), the global mask built before it, the embeddings' output and what the
    embeddings keep."""
    global_mask, sliding_mask = _modernbert_masks(encoder, setup)
    if not sliding_mask:
        return {}
    z = _Sizes(encoder, setup)
    embeddings = sum(_embedding_terms(encoder, setup, trainable=setup.adapters is None).values())
    moment = 16 * z.S * z.S + global_mask * z.B * z.S * z.S + z.T * z.H * 4 + embeddings
    if moment <= others:
        return {}
    return {"building the sliding-window mask (int64 |i - j|), beyond the rest": moment - others}


def _conv_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """DeBERTa-v2's ConvLayer (xlarge, xxlarge): a convolution of the embeddings' output, masked,
    dropped out and activated, added to the first layer's output, LayerNorm, times the padding mask."""
    z = _Sizes(encoder, setup)
    T, H, e = z.T, z.H, z.e
    # LayerNorm keeps its input and stats; the product with the float padding mask keeps the mask.
    terms = {"conv layer: LayerNorm input + stats, padding mask": T * H * 4 + 2 * T * 4 + T * 4}
    if setup.adapters is not None and not setup.gradient_checkpointing:
        return terms  # a frozen convolution of frozen embeddings: nothing before the sum needs a gradient
    # The convolution's input (a contiguous copy, or autocast's bf16 one), the bool mask of
    # masked_fill, the dropout mask and the activation's input.
    terms["conv layer: input, masks, activation input"] = T * H * e + z.B * z.S + z.mask(T * H, e) + T * H * e
    if setup.half_precision:
        terms[f"conv layer: weight, {setup.precision} copy"] = 2 * encoder.conv_weights
    return terms


def _head_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    # The pooler's and classifier's tensors: batch x hidden each (FamilyForward.head).
    z = _Sizes(encoder, setup)
    always, with_dropout = encoder.family.head
    pieces = always + (with_dropout if encoder.classifier_dropout > 0 else 0)
    return {"pooler and classifier": pieces * z.B * z.H * z.e}


def _first_layer_difference(encoder: Encoder, setup: Setup, fused: bool) -> int:
    """What the first layer keeps less than the others. Adapters: its input needs no gradient (nor,
    pre-norm, does its first LayerNorm keep it). ModernBERT: it has no LayerNorm before the attention."""
    z = _Sizes(encoder, setup)
    T, H, e = z.T, z.H, z.e
    savings = 0
    if encoder.family.layer == GATED_ROTARY:
        savings += T * H * 4 + 2 * T * 4
    if setup.adapters is None:
        return savings
    if encoder.family.layer == PRE_NORM:
        savings += T * H * 4 + 2 * T * 4
    if encoder.family.layer == RMS_GATED:  # the first RMSNorm's input and 1 / rms
        savings += T * H * 4 + T * 4
    adapted = encoder.adapted_projections
    if encoder.family.layer != GATED_ROTARY and not fused and adapted and "key" not in adapted:
        savings += T * H * e  # K needs no gradient there, so the copy of Q its gradient would use is not kept
        relative = encoder.relative
        if relative is not None and relative.p2c:
            # Nor does p2c keep the projected positions for K's gradient.
            savings += setup.batch_size * 2 * relative.span(setup.seq_length) * H * e
    if setup.adapters.dropout > 0:  # dropout masks of the adapters that read the layer's input
        savings += sum(z.mask(T * a.inputs, 4) for a in encoder.adapters if a.role == "qkv")
    return savings


def _backward_transient(encoder: Encoder, setup: Setup, fused: bool) -> int:
    """What the top layer's backward adds on top of everything forward kept, at its highest.

    The FFN moment: the gradient of the GELU output (T x F) appears while the layer's saved
    tensors are still there (full fine-tuning frees the GELU output it kept for the weight
    gradient at the same time; LoRA kept none, so it also holds the GELU input's gradient).
    The attention moment (eager or math kernel only): the gradients of the probabilities
    (B x A x S x S, one or two of them) after the FFN's saved tensors are gone. A quantized base
    adds a moment of its own, when a 4-bit weight is dequantized (for small batches the largest).
    Fitted to the measured CPU order of frees (tests/workbench/test_planner.py checks it). Other families
    hold more or less at those moments (`_family_transient`).
    """
    z = _Sizes(encoder, setup)
    T, H, F, e = z.T, z.H, z.F, z.e
    if encoder.family.layer == GATED_ROTARY:
        # The gated FFN's backward: the gradients of Wi's 2F-wide output (LoRA: and of the gate's
        # product) while the layer's saved tensors are there (fitted to the CPU order of frees).
        return (2 if setup.adapters is not None else 1) * T * F * e + T * H * 4
    if encoder.family.layer == PRE_NORM:
        return _pre_norm_transient(encoder, setup, fused)
    if encoder.family.layer == GATED_POST_NORM and setup.adapters is None:
        # The gated FFN's backward: down_proj's input gradient (T x F) and the two factors' (T x F
        # each) meet the layer's saved tensors; without GTE's dropout the product's gradient is not
        # freed by the mask's multiply first (fitted to the CPU order of frees, 3 batch shapes).
        ffn = T * F * e + (T * H * 4 if encoder.hidden_dropout == 0 else 0)
        return max(ffn, 0 if fused else _attention_moment(encoder, setup))
    return _bert_transient(encoder, setup, fused) + _family_transient(encoder, setup)


def _pre_norm_transient(encoder: Encoder, setup: Setup, fused: bool) -> int:
    """XLM-R XL's highest moment, beyond everything forward kept (fitted to the CPU order of frees).

    The final LayerNorm and the head are not there at the top layer's moments (docs/planner.md,
    "Pre-norm"). Full fine-tuning: the final LayerNorm's backward (the gradients of the last
    hidden states and of its input, T x H each), or the FFN's output linear, whose input gradient
    (T x F) joins the LayerNorm's, with the LayerNorm's input freed. LoRA: the end of the last
    layer's forward (the frozen FFN's outputs, referenced but not kept, and the bool attention
    mask), or the FFN's backward (the gradients of the GELU output and input). Activation
    checkpointing keeps the bool attention mask for the recomputation, and the recomputed top
    layer's LayerNorm outputs meet those gradients. The attention moment of long sequences is BERT's.
    """
    z = _Sizes(encoder, setup)
    B, S, T, H, F, e = z.B, z.S, z.T, z.H, z.F, z.e
    recomputed = setup.gradient_checkpointing
    final_norm = T * H * 4 + 2 * T * 4
    head = sum(_head_terms(encoder, setup).values())
    if setup.adapters is None:
        norm_moment = 2 * T * H * 4 - (2 * T * 4 if recomputed else 0)
        ffn = max(norm_moment, T * H * 4 + T * F * e - final_norm) - head
    else:
        forward_end = T * F * e + 3 * T * H * 4 + B * S * S
        backward = 2 * T * F * e + T * H * 4 + (T * H * 4 - 4 * T * 4 if recomputed else 0)
        ffn = max(forward_end, backward) - final_norm - head
        if setup.shape.quantized_base:  # a 4-bit weight dequantized (see _bert_transient)
            ffn = max(ffn, _dequantized_bytes_per_weight(setup) * H * F - T * H * 2)
    if recomputed:
        ffn += B * S * S
    return max(ffn, 0 if fused else _attention_moment(encoder, setup))


def _bert_transient(encoder: Encoder, setup: Setup, fused: bool) -> int:
    z = _Sizes(encoder, setup)
    T, H, F, e = z.T, z.H, z.F, z.e
    if setup.adapters is not None:
        ffn = 2 * T * F * e + T * H * 4 + 4 * T * setup.adapters.r * e
        if setup.shape.quantized_base:
            # The input gradient of an NF4 linear needs its weight back: bitsandbytes dequantizes
            # the largest one (H x F) to fp32 and copies it to bf16, 6 B per weight, for a moment.
            ffn = max(ffn, _dequantized_bytes_per_weight(setup) * H * F - T * H * 2)
    else:
        ffn = T * F * e - T * H * 4
    return max(ffn, 0 if fused else _attention_moment(encoder, setup))


def _attention_moment(encoder: Encoder, setup: Setup) -> int:
    """The top layer's attention moment (eager or math kernel): the gradients of the probabilities
    (one, or two without attention dropout) once the FFN's saved tensors are gone."""
    z = _Sizes(encoder, setup)
    T, H, F, e = z.T, z.H, z.F, z.e
    probabilities = (1 if encoder.attention_dropout > 0 else 2) * z.P * 4
    if setup.adapters is not None:
        return probabilities - T * F * e - T * H * 4
    return probabilities - 2 * T * F * e - 4 * T * H * 4


def _family_transient(encoder: Encoder, setup: Setup) -> int:
    """What a family holds at BERT's highest moment beyond BERT (0 for BERT itself), on the CPU order of frees.

    The highest moment is often the end of forward, at the last LayerNorm, when what the forward
    made once (masks, position tables) is still there and the last layer's own outputs are being
    made; under LoRA the frozen layer's outputs, kept by no one, are still referenced there.
    """
    z = _Sizes(encoder, setup)
    B, S, T, H, F, e = z.B, z.S, z.T, z.H, z.F, z.e
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
        extra += z.P * 4 + (3 * B * S * S if setup.padded else 0)
    if family.layer == DISENTANGLED:
        # DeBERTa: an int64 attention mask (B x S x S) and the relative positions (S x S), made once
        # per forward; v1's LayerNorm, written as ops, has two more T x H temporaries.
        extra += B * S * S * 8 + S * S * 8 + (2 * T * H * 4 if family.layer_norm_ops else 0)
    return extra


# --- a no-grad forward (distillation's teacher pass) ------------------------------------------------


def inference_activation_terms(encoder: Encoder, setup: Setup) -> dict[str, int]:
    """What a forward under torch.inference_mode holds at its highest, by name: one layer's moment.

    Nothing is kept for backward, so every tensor goes once the next op has read it, and the peak is
    one layer's. Measured on CPU (all-MiniLM-L6-v2 at batch 64 x 64, 16 x 128 and 8 x 256 within 2%;
    tests/workbench/test_planner.py checks it and every family's tiny model, within 25%):
        the FFN's moment      its first linear's output and the activation's (2 T x F x e; a gated
                              FFN's first linear is 2F wide: 3 T x F x e), with the residual stream,
                              the attention block's output and the LayerNorm between (3 T x H x 4)
        eager attention       the scores and their softmax (2 x B x A x S x S x 4) with Q, K, V
                              (3 T x H x e) over the same stream; DeBERTa adds its c2p and p2c scores
                              (B x A x S x 2k x 4 each), gathered to S x S and summed (3 x B x A x S x S x 4)
        fused SDPA            in eval it runs on CPU too (no dropout to refuse it): no S x S scores;
                              a padded batch's mask made float (B x S x S x e)
    and what a family builds once per forward: MPNet's relative position bias and its sum with the
    mask (2 x B x A x S x S x 4); ModernBERT's two float masks (global, sliding window: B x S x S x 4
    each) and its rotated Q and K (2 T x H x e).
    """
    z = _Sizes(encoder, setup)
    T, H, F, e = z.T, z.H, z.F, z.e
    terms = {"residual stream, block output, LayerNorm": 3 * T * H * 4}
    ffn = (3 if encoder.gated_ffn else 2) * T * F * e
    fused = attention_kernel(encoder, setup) != "eager"
    if fused:
        masked = setup.padded and encoder.family.layer != GATED_ROTARY and not _flash(encoder, setup)
        attention = z.B * z.S * z.S * e if masked else 0
    else:
        attention = 3 * T * H * e + 2 * z.P * 4
        relative = encoder.relative
        if relative is not None:
            raw = (int(relative.c2p) + int(relative.p2c)) * z.B * z.A * z.S * 2 * relative.span(z.S) * 4
            attention += raw + 3 * z.P * 4
    if attention > ffn:
        terms["attention scores, softmax and Q, K, V"] = attention
    else:
        terms["FFN linear output and activation"] = ffn
        if fused and attention:
            terms["attention mask, float"] = attention
    if encoder.family.relative_bias:
        terms["relative position bias and masked sum"] = 2 * z.P * 4
    if encoder.family.layer == GATED_ROTARY:
        if not _flash(encoder, setup):
            terms["global and sliding-window masks, float"] = 2 * z.B * z.S * z.S * 4
        terms["rotated Q and K"] = 2 * T * H * e
    return terms
