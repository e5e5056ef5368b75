"""What an optimizer's state really occupies, measured after training for every recipe (not a formula:
docs/memory.md, "Optimizer state, measured"); memory/ walks the same tensors."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from torch import nn

# bitsandbytes' default `min_8bit_size`: smaller tensors keep 32-bit state (quantizing a bias of
# 768 values saves 4.5 KiB and costs precision). A test checks it against the installed version.
MIN_8BIT_SIZE = 4096


def unwrap_optimizer(optimizer):
    """The torch optimizer itself: accelerate's AcceleratedOptimizer (what trainer.optimizer is)
    keeps the real one in `.optimizer`."""
    while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
        optimizer = optimizer.optimizer
    return optimizer


def tensors_in(value: Any):
    """Every tensor in a nested structure of dicts, lists, tuples and bitsandbytes QuantState objects
    (an optimizer's state; a 4-bit weight's block scales, and the scales of those scales)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif type(value).__name__ == "QuantState":
        yield from tensors_in(vars(value))


def optimizer_state_tensors(optimizer):
    """The tensors in `optimizer.state` (Adam moments, 8-bit quantization maps, step counters)."""
    optimizer = unwrap_optimizer(optimizer)
    return tensors_in(list(getattr(optimizer, "state", {}).values())) if optimizer is not None else iter(())


def parameter_kind(parameter: torch.Tensor, embedding_ids: set[int]) -> str:
    """'embedding' (an nn.Embedding weight), 'large' (>= MIN_8BIT_SIZE elements) or 'small'."""
    if id(parameter) in embedding_ids:
        return "embedding"
    return "large" if parameter.numel() >= MIN_8BIT_SIZE else "small"


def optimizer_state_summary(optimizer, model: nn.Module | None = None) -> dict[str, Any]:
    """Bytes held by the optimizer's state tensors (this process), in total, by dtype and by parameter kind
    (`parameter_kind`: what bitsandbytes can quantize). A tensor several parameters share (bitsandbytes'
    two 256-entry quantization maps) counts once, under the first parameter that holds it."""
    optimizer = unwrap_optimizer(optimizer)
    state = getattr(optimizer, "state", None)
    if optimizer is None or state is None:
        return {
            "optimizer_state_bytes": None,
            "optimizer_state_bytes_by_dtype": None,
            "optimizer_state_bytes_by_parameter_kind": None,
        }
    embedding_ids = set()
    if model is not None:
        embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    seen_storages: set[tuple[int, int]] = set()
    by_dtype: dict[str, int] = defaultdict(int)
    by_kind: dict[str, int] = defaultdict(int)
    for parameter, parameter_state in state.items():
        kind = parameter_kind(parameter, embedding_ids) if isinstance(parameter, torch.Tensor) else "small"
        for tensor in tensors_in(parameter_state):
            key = (tensor.untyped_storage().data_ptr(), tensor.nbytes)
            if tensor.nbytes == 0 or key in seen_storages:
                continue
            seen_storages.add(key)
            by_dtype[str(tensor.dtype).removeprefix("torch.")] += tensor.nbytes
            by_kind[kind] += tensor.nbytes
    return {
        "optimizer_state_bytes": sum(by_dtype.values()),
        "optimizer_state_bytes_by_dtype": dict(sorted(by_dtype.items())),
        "optimizer_state_bytes_by_parameter_kind": {
            kind: by_kind.get(kind, 0) for kind in ("embedding", "large", "small")
        },
    }
