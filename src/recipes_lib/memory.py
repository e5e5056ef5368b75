"""Memory figures for results.json: what was measured, on which device, and how.

CUDA: the caching allocator's peak bytes (`max_memory_allocated` is what tensors held,
`max_memory_reserved` what the allocator took from the driver, which is what `nvidia-smi` shows
minus the CUDA context). CPU: the process's peak resident set size from the kernel, which also
counts the Python interpreter, libraries and the dataset in memory.
"""

from __future__ import annotations

import resource
import sys

import torch

GIB = 2**30


def peak_rss_gib() -> float:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / GIB if sys.platform == "darwin" else peak * 1024 / GIB


def peak_memory(device: torch.device) -> dict[str, float | str | None]:
    if device.type == "cuda":
        return {
            "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 4),
            "peak_memory_reserved_gib": round(torch.cuda.max_memory_reserved(device) / GIB, 4),
            "peak_memory_source": "torch.cuda.max_memory_allocated (tensors, whole run)",
        }
    return {
        "peak_memory_gib": round(peak_rss_gib(), 4),
        "peak_memory_reserved_gib": None,
        "peak_memory_source": "process peak RSS (getrusage ru_maxrss, whole process)",
    }
