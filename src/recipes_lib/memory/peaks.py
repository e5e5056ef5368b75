"""A process's peak memory: the kernel's peak RSS (reset per phase on Linux) and the whole run's
CUDA or CPU peak, for results.json."""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Any, Protocol

import torch

from recipes_lib.units import GIB


def peak_rss_gib() -> float:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / GIB if sys.platform == "darwin" else peak * 1024 / GIB


class PhasePeaks(Protocol):
    """What `peak_memory` reads of a run's memory monitor (memory/monitor.py's MemoryMonitor)."""

    phases: dict[str, Any]
    process_peak_rss: int


def peak_memory(device: torch.device, monitor: PhasePeaks | None = None) -> dict[str, float | str | None]:
    """The whole run's peak, CUDA max allocated / reserved or on CPU the process's peak RSS: the highest
    of the monitor's phases' peaks (it resets the counters as each phase begins) and of the counters now."""
    phases = list(monitor.phases.values()) if monitor is not None else []
    if device.type == "cuda":
        allocated = max([torch.cuda.max_memory_allocated(device)] + [p.max_allocated or 0 for p in phases])
        reserved = max([torch.cuda.max_memory_reserved(device)] + [p.max_reserved or 0 for p in phases])
        return {
            "peak_memory_gib": round(allocated / GIB, 4),
            "peak_memory_reserved_gib": round(reserved / GIB, 4),
            "peak_memory_source": "torch.cuda.max_memory_allocated (tensors, whole run)",
        }
    rss = max(peak_rss_gib(), (monitor.process_peak_rss if monitor is not None else 0) / GIB)
    return {
        "peak_memory_gib": round(rss, 4),
        "peak_memory_reserved_gib": None,
        "peak_memory_source": "process peak RSS (the kernel's peak resident set size, whole run)",
    }


def read_kernel_peak_rss() -> int | None:
    """VmHWM (peak RSS since the last reset) in bytes; None where /proc is not there (macOS)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_kernel_peak_rss() -> bool:
    # Writing 5 to clear_refs resets the peak RSS to the current RSS (Linux 4.0+).
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False
