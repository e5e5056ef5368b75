"""Model configs for the planner, with no weights (`load_config_and_source` says from where), and
BERT_FAMILY: BERT at every size, for the largest model that fits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recipes_lib.errors import ModelError
from recipes_workbench.planner.catalogue import CATALOGUE, catalogue_entry, catalogue_names

_BERT_UNCASED_VOCAB = CATALOGUE["google-bert/bert-base-uncased"].values["vocab_size"]

# Where a config came from, as the plan says it (the first words are what tests and users read).
SOURCE_CATALOGUE = "catalogue: the published config.json values shipped with recipes-lib (nothing downloaded)"
SOURCE_HUB_CACHE = "Hub cache: its config.json in the local Hugging Face cache"
SOURCE_HUB = "Hub: its config.json downloaded (config only, no weights)"


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


def load_config(name_or_path: str, num_labels: int = 2):
    """load_config_and_source's config: nothing but config.json is read, no weights downloaded."""
    return load_config_and_source(name_or_path, num_labels)[0]


def load_config_and_source(name_or_path: str, num_labels: int = 2) -> tuple[Any, str]:
    """(config, where it came from, in words), looked up in this order:

    1. a config.json file, or a local model directory (a pip-installed copy counts as one);
    2. the Hugging Face cache, so a checkpoint the user has downloaded is planned as it is;
    3. the catalogue of published encoders, so a fresh clone plans them offline;
    4. the Hub, for config.json only (fails fast under HF_HUB_OFFLINE=1).
    """
    from transformers import AutoConfig

    from recipes_lib.modeling.sources import resolve_model_path

    path = Path(name_or_path)
    if path.is_file():
        return _config_from_file(path, num_labels), f"local: config file {path}"
    resolved = resolve_model_path(name_or_path)
    if Path(resolved).is_dir():
        config = AutoConfig.from_pretrained(resolved, num_labels=num_labels)
        return config, f"local: directory {resolved}"
    try:
        config = AutoConfig.from_pretrained(resolved, num_labels=num_labels, local_files_only=True)
        return config, SOURCE_HUB_CACHE
    except (OSError, ValueError):
        pass  # not cached: the catalogue, then the Hub
    entry = catalogue_entry(name_or_path)
    if entry is not None:
        return entry.config(num_labels), SOURCE_CATALOGUE
    try:
        return AutoConfig.from_pretrained(resolved, num_labels=num_labels), SOURCE_HUB
    except (OSError, ValueError) as error:
        raise ModelError(
            f"No config for '{name_or_path}': {str(error).strip().splitlines()[0]}. Pass a local directory or "
            "config.json (no weights needed), or a model of the catalogue (recipes-lib plan --fits lists "
            "them): " + ", ".join(catalogue_names()) + "."
        ) from None


def _config_from_file(path: Path, num_labels: int):
    """The config a config.json describes, with `num_labels` labels instead of its own."""
    from transformers import AutoConfig

    from recipes_lib.modeling.families import check_transformers_knows

    values = json.loads(path.read_text())
    for key in ("num_labels", "id2label", "label2id"):
        values.pop(key, None)
    model_type = values.pop("model_type", "bert")
    check_transformers_knows(model_type)
    return AutoConfig.for_model(model_type, **values, num_labels=num_labels)
