"""A regression head that computes in fp32 under autocast (issue #55): in bf16 a score keeps 8 bits of
mantissa (steps of 0.016 to 0.031 on a 0-5 scale; 1,500 predictions took 395 distinct values). The head's
class becomes a subclass whose forward leaves autocast, so its weights and names, and saving, loading,
LoRA's copy and export, are unchanged; classification heads are left alone.
"""

from __future__ import annotations

import torch

from recipes_lib.config.tasks import REGRESSION

HEAD_NAMES = ("classifier", "score")  # what transformers' *ForSequenceClassification call their head
_FP32_CLASSES: dict[type, type] = {}


def _fp32_class(base: type) -> type:
    """`base` with a forward that runs outside autocast, on fp32 inputs (the head's own dtype)."""
    if base in _FP32_CLASSES.values():
        return base
    if base not in _FP32_CLASSES:

        def forward(self, *args, **kwargs):
            device = next((arg.device.type for arg in args if torch.is_tensor(arg)), "cpu")
            if not torch.is_autocast_enabled(device):
                return base.forward(self, *args, **kwargs)
            dtype = next(self.parameters()).dtype
            args = tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)
            with torch.autocast(device_type=device, enabled=False):
                return base.forward(self, *args, **kwargs)

        _FP32_CLASSES[base] = type(
            base.__name__, (base,), {"forward": forward, "__module__": base.__module__}
        )
    return _FP32_CLASSES[base]


def score_head_in_fp32(model):
    """A regression model's head computed in fp32 under autocast; any other model as it is. Returns `model`."""
    if getattr(model.config, "problem_type", None) != REGRESSION:
        return model
    for name in HEAD_NAMES:
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            head.__class__ = _fp32_class(type(head))
            break
    return model
