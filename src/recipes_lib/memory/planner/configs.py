"""Model configs for the planner, with no weights: from a local directory or config.json, the Hub
cache, or the published values of the BERT checkpoints (KNOWN_CONFIGS), so `recipes-lib plan`
answers offline with nothing downloaded. BERT_FAMILY is BERT at every size, for the largest model
that fits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recipes_lib.errors import ModelError

# Published config.json values of the BERT checkpoints people mean by these names. A local
# directory or config.json always wins.
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


def load_config(name_or_path: str, num_labels: int = 2):
    """A model config from a local directory, a config.json, the Hub cache, or the published values.

    Nothing but config.json is read, so no weights are downloaded; offline, a Hub name works when
    its config is cached, is pip-installed (MiniLM), or is one of KNOWN_CONFIGS.
    """
    return load_config_and_source(name_or_path, num_labels)[0]


def load_config_and_source(name_or_path: str, num_labels: int = 2) -> tuple[Any, str]:
    """(config, where it came from, in words)."""
    from transformers import AutoConfig, BertConfig

    from recipes_lib.modeling.loading import resolve_model_path

    path = Path(name_or_path)
    if path.is_file():
        return _config_from_file(path, num_labels), f"config file {path}"
    # A name with published values needs no network: the cached config if there is one, else those.
    known = name_or_path in KNOWN_CONFIGS
    try:
        resolved = resolve_model_path(name_or_path)
        config = AutoConfig.from_pretrained(resolved, num_labels=num_labels, local_files_only=known)
        return config, ("local directory " + str(resolved)) if Path(
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


def _config_from_file(path: Path, num_labels: int):
    """The config a config.json describes, with `num_labels` labels instead of its own."""
    from transformers import AutoConfig

    values = json.loads(path.read_text())
    for key in ("num_labels", "id2label", "label2id"):
        values.pop(key, None)
    return AutoConfig.for_model(values.pop("model_type", "bert"), **values, num_labels=num_labels)
