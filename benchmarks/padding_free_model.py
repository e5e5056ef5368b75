"""Padding-free batches: a batch's rows packed into one row, attention kept inside each row.

An experiment, not yet a recipe option: it lives beside its benchmark (benchmarks/padding_free.py)
until a GPU measurement (benchmarks/gpu_check.sh --parts padding_free) shows it pays; on a CPU it loses.

docs/speed.md ("Padding-free batches") says how and which families take it (each checked by
tests/test_padding_free.py). Three pieces: `PaddingFreeCollator` packs the rows, numbering positions
per row and passing the boundaries as transformers' own keyword arguments (`cu_seq_lens_q`,
`max_length_q`: DataCollatorWithFlattening is for token-level labels, a classifier needs one label per
row); `varlen_sdpa`, registered in transformers' AttentionInterface, keeps attention inside each row
(a padded batch, in evaluation and predict, runs transformers' own SDPA); and a forward hook puts the
packed row back into a zero-padded batch, so the family's stock pooler and classifier run unchanged.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F

VARLEN_ATTENTION = "varlen_sdpa"

# model_type -> the attribute of the base model whose output is the last hidden state the head reads
# ("" : the base model itself, which has no pooler). Its forward receives the model's keyword
# arguments, cu_seq_lens_q included, which the hook needs to put the rows back.
_HEAD_INPUT_MODULE = {
    "bert": "encoder",
    "roberta": "encoder",
    "camembert": "encoder",
    "xlm-roberta": "encoder",
    "electra": "encoder",
    "albert": "encoder",
    "distilbert": "transformer",
    "modernbert": "",
}
_POSITIONS_AFTER_PADDING = ("roberta", "camembert", "xlm-roberta")


def padding_free_applies(config) -> str | None:
    """None where `config`'s family takes packed rows; else why not, in words."""
    if config.model_type not in _HEAD_INPUT_MODULE:
        return f"{config.model_type}'s attention does not take packed rows (docs/speed.md lists which do)"
    if getattr(config, "classifier_pooling", "cls") != "cls":
        return f"classifier_pooling '{config.classifier_pooling}' averages over the padding the packed row puts back"
    return None


def resolve_padding_free(asked: bool | None, config, device_type: str) -> bool:
    """The run's choice: None (the default) packs on CUDA where the family takes it and pads elsewhere
    (on a CPU the jagged attention's math path costs back part of what packing saves); True packs or
    says why it cannot; False pads."""
    reason = padding_free_applies(config)
    if asked is None:
        return device_type == "cuda" and reason is None
    if asked and reason is not None:
        raise ValueError(f"padding_free: {reason}. Leave padding_free off for {config.model_type}.")
    return asked


def position_offset(config) -> int:
    """The first position a row's tokens take: padding_idx + 1 in RoBERTa-style embeddings, else 0."""
    return config.pad_token_id + 1 if config.model_type in _POSITIONS_AFTER_PADDING else 0


@dataclass(frozen=True)
class PaddingFreeCollator:
    """Packs a batch's tokenized rows into one row of their tokens, with each row's boundaries (the mask);
    per-row values (labels, a distillation's teacher logits) stay one per row."""

    first_position: int = 0  # position_offset(config)

    def __call__(self, features: list[dict]) -> dict:
        lengths = [len(feature["input_ids"]) for feature in features]
        batch = {
            "input_ids": torch.tensor([t for feature in features for t in feature["input_ids"]]).unsqueeze(0),
            "position_ids": torch.cat(
                [torch.arange(self.first_position, self.first_position + n) for n in lengths]
            ).unsqueeze(0),
        }
        if "token_type_ids" in features[0]:
            batch["token_type_ids"] = torch.tensor(
                [t for feature in features for t in feature["token_type_ids"]]
            ).unsqueeze(0)
        boundaries = torch.tensor([0, *lengths]).cumsum(0).to(torch.int32)
        batch.update(
            cu_seq_lens_q=boundaries,
            cu_seq_lens_k=boundaries,
            max_length_q=max(lengths),
            max_length_k=max(lengths),
        )
        token_keys = {"input_ids", "token_type_ids", "attention_mask", "special_tokens_mask"}
        for key in features[0].keys() - token_keys:
            name = "labels" if key == "label" else key  # DataCollatorWithPadding's renaming
            batch[name] = torch.tensor([feature[key] for feature in features])
        return batch


def _row_boundaries(batch: int, length: int, device) -> torch.Tensor:
    return torch.arange(0, (batch + 1) * length, length, device=device, dtype=torch.int32)


def _varlen_attn_with_window():
    """torch.nn.attention.varlen.varlen_attn where it takes a window (torch 2.13's does; older releases
    lack the module or the argument: the per-row reference runs instead), else None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn if "window_size" in inspect.signature(varlen_attn).parameters else None


def varlen_attention_forward(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention over packed rows; query, key and value are (1, heads, tokens, head_dim) as
    transformers passes them, the result (1, tokens, heads, head_dim) as it expects back."""
    if attention_mask is not None:
        # A padded batch with its mask (sliding window included): transformers' own SDPA.
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    batch, heads, length, head_dim = query.shape
    if cu_seq_lens_q is None:  # rows without padding: each row is one sequence
        cu_seq_lens_q, max_length_q = _row_boundaries(batch, length, query.device), length

    def packed(tensor):  # (batch, heads, length, head_dim) -> (tokens, heads, head_dim), contiguous as the
        # jagged kernels require (ModernBERT's q, k and v are strided views of one fused projection)
        return tensor.transpose(1, 2).reshape(-1, tensor.shape[1], head_dim).contiguous()

    q, k, v = packed(query), packed(key), packed(value)
    # ModernBERT's local layers: module.sliding_window = half-window + 1 (flash's inclusive bound),
    # so a token sees those within sliding_window - 1 on each side; it binds only in longer rows.
    window = sliding_window - 1 if sliding_window is not None and max_length_q > sliding_window else None
    if window is None:
        offsets = cu_seq_lens_q.to(torch.int64)

        def jagged(tensor):  # (rows, heads, ragged tokens, head_dim)
            return torch.nested.nested_tensor_from_jagged(tensor, offsets, max_seqlen=max_length_q).transpose(
                1, 2
            )

        out = F.scaled_dot_product_attention(
            jagged(q), jagged(k), jagged(v), dropout_p=dropout, scale=scaling
        )
        out = out.transpose(1, 2).values()
    elif q.is_cuda and dropout == 0.0 and (varlen_attn := _varlen_attn_with_window()) is not None:
        out = varlen_attn(
            q,
            k,
            v,
            cu_seq_lens_q,
            cu_seq_lens_q,
            max_length_q,
            max_length_q,
            scale=scaling,
            window_size=(window, window),
        )
    else:  # the reference: one SDPA call per row, with the window as a mask
        rows = []
        for start, end in zip(cu_seq_lens_q[:-1].tolist(), cu_seq_lens_q[1:].tolist(), strict=True):
            positions = torch.arange(end - start, device=q.device)
            within = (positions[:, None] - positions[None, :]).abs() <= window
            q_row, k_row, v_row = (t[start:end].transpose(0, 1) for t in (q, k, v))
            out_row = F.scaled_dot_product_attention(
                q_row, k_row, v_row, attn_mask=within, dropout_p=dropout, scale=scaling
            )
            rows.append(out_row.transpose(0, 1))
        out = torch.cat(rows)
    return out.reshape(batch, length, heads, head_dim), None


def _padding_mask_only(*args, attention_mask=None, **kwargs):
    """The mask for VARLEN_ATTENTION: SDPA's where a padded batch brings one; none for packed rows,
    whose boundaries travel as cu_seq_lens_q (a T x T block mask would cost T^2 memory)."""
    from transformers.masking_utils import sdpa_mask

    return None if attention_mask is None else sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def register_varlen_attention() -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(VARLEN_ATTENTION, varlen_attention_forward)
    AttentionMaskInterface.register(VARLEN_ATTENTION, _padding_mask_only)
    return VARLEN_ATTENTION


def _unpack_rows(module, args, kwargs, output):
    """Forward hook: the packed (1, tokens, hidden) last hidden state back to (rows, longest, hidden),
    zeros after each row's end, so the family's pooler and classifier read each row's first token."""
    boundaries = kwargs.get("cu_seq_lens_q")
    if boundaries is None:
        return output
    packed = output[0] if isinstance(output, tuple) else output.last_hidden_state
    lengths = boundaries.diff().to(torch.int64)
    row = torch.repeat_interleave(torch.arange(len(lengths), device=packed.device), lengths)
    column = torch.arange(packed.shape[1], device=packed.device) - torch.repeat_interleave(
        boundaries[:-1].to(torch.int64), lengths
    )
    padded = packed.new_zeros(len(lengths), kwargs["max_length_q"], packed.shape[-1])
    padded = padded.index_put((row, column), packed[0])
    if isinstance(output, tuple):
        return (padded, *output[1:])
    output.last_hidden_state = padded
    return output


def enable_padding_free(model) -> None:
    """Switches `model` (a ...ForSequenceClassification of a family that takes packed rows) to
    VARLEN_ATTENTION and hooks its head's input; feed it PaddingFreeCollator's batches. Padded
    batches (with an attention_mask) still work, through SDPA."""
    reason = padding_free_applies(model.config)
    if reason is not None:
        raise ValueError(f"padding_free: {reason}. Leave padding_free off for {model.config.model_type}.")
    model.set_attn_implementation(register_varlen_attention())
    base = model.base_model
    name = _HEAD_INPUT_MODULE[model.config.model_type]
    (getattr(base, name) if name else base).register_forward_hook(_unpack_rows, with_kwargs=True)
