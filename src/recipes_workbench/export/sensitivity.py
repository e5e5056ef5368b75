"""int8's fallback: the fewest nodes kept in fp32 that bring an int8 model within its gate: each node
ranked by the damage its int8 alone does, then kept in fp32 one more at a time until the model passes
or MAX_KEPT are kept (docs/export.md, "When int8 fails: nodes kept in fp32").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

SENSITIVITY_ROWS = 128
MAX_KEPT = 8


def rank_nodes(quantizer, scratch: Path, logits_of: Callable[[Path], np.ndarray], reference: np.ndarray):
    """[(node, damage)], most damaging first: each node quantized alone, its logits' mean squared
    difference from `reference` (PyTorch's logits on the rows `logits_of` runs)."""
    candidates = quantizer.candidates()
    alone = scratch / "alone.int8.onnx"
    damage = {}
    for node in candidates:
        quantizer.quantize(alone, [other for other in candidates if other != node])
        damage[node] = float(np.mean((logits_of(alone).astype(np.float64) - reference) ** 2))
    return sorted(damage.items(), key=lambda item: -item[1])


def keep_sensitive_nodes(
    quantizer,
    int8_path: Path,
    ranked: list[tuple[str, float]],
    gate_of: Callable[[Path], dict],
    passes: Callable[[dict], bool],
) -> tuple[dict, dict]:
    """Keep the most damaging nodes in fp32, one more at a time, until the int8 model passes; returns its gate
    figures (gate.compare's) and the quantizer's record. All MAX_KEPT kept is tried first, and when even that
    fails the search stops (a heuristic, docs/export.md: issue #55's export searched 4 minutes to fail anyway)."""
    most = [node for node, _ in ranked[:MAX_KEPT]]
    if not most:
        return None, None
    recipe = quantizer.quantize(int8_path, most)
    result = gate_of(int8_path)
    if not passes(result):
        logger.warning(
            "int8 cannot pass its gate with any node choice searched: even with its %d most damaging nodes kept in "
            "fp32 it agrees on %.2f%% and loses %.2f points; the search stops (the gate says what fails).",
            len(most), 100 * result["agreement"], result["metric_drop_points"],
        )  # fmt: skip
        return result, {
            **recipe,
            "search": f"stopped: fails with all {len(most)} most damaging nodes in fp32",
        }
    kept: list[str] = []
    for node, damage in ranked[: len(most)]:
        kept.append(node)
        recipe = quantizer.quantize(int8_path, kept)
        result = gate_of(int8_path)
        logger.info(
            "int8 with %d node(s) kept in fp32 (the last %s, damage %.2e): agreement %.2f%%, drop %.2f points.",
            len(kept), node, damage, 100 * result["agreement"], result["metric_drop_points"],
        )  # fmt: skip
        if passes(result):
            break
    return result, recipe
