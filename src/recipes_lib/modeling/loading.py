"""Model and tokenizer loading: AutoModelForSequenceClassification from a Hub id or a local path."""

from __future__ import annotations

import logging
import re

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from recipes_lib.config.arguments import ModelArguments
from recipes_lib.config.bitsandbytes_import import import_bitsandbytes
from recipes_lib.config.family_registry import family_for
from recipes_lib.config.tasks import REGRESSION
from recipes_lib.errors import ModelError
from recipes_lib.modeling.families import (
    FLASH_ATTENTION,
    ArchitectureProfile,
    check_sequence_length,
    cuda_available,
    flash_attention_available,
    profile_for,
)
from recipes_lib.modeling.sources import resolve_model_path

logger = logging.getLogger(__name__)


def load_tokenizer(model_args: ModelArguments):
    source = resolve_model_path(model_args.tokenizer_name or model_args.model_name_or_path)
    try:
        return AutoTokenizer.from_pretrained(
            source,
            cache_dir=model_args.cache_dir,
            revision=model_args.model_revision,
            trust_remote_code=model_args.trust_remote_code,
        )
    except (OSError, ValueError, ImportError) as error:
        from recipes_lib.modeling.load_failures import tokenizer_not_loaded

        raise tokenizer_not_loaded(model_args, source, error) from None


def load_model_config(model_args: ModelArguments, labels=None):
    """The model's config with the data's label mapping (names, ids, task), so the saved model predicts
    class names; without `labels`, as published (for checks before the data is read)."""
    # problem_type picks the head's loss in transformers: cross-entropy, BCE with logits, or MSE.
    names = ("num_labels", "id2label", "label2id", "problem_type") if labels is not None else ()
    label_settings = {name: getattr(labels, name) for name in names}
    try:
        return AutoConfig.from_pretrained(
            resolve_model_path(model_args.model_name_or_path),
            **label_settings,
            cache_dir=model_args.cache_dir,
            revision=model_args.model_revision,
            trust_remote_code=model_args.trust_remote_code,
        )
    except (OSError, ValueError) as error:
        from recipes_lib.modeling.load_failures import config_not_loaded

        raise config_not_loaded(model_args, error) from None


def check_model_support(
    model_args: ModelArguments, model_config, max_seq_length: int
) -> tuple[ArchitectureProfile, str]:
    """The family's profile and the attention kernel the run uses (as asked, checked; or the family's
    best that this machine runs), checked on config.json alone with max_seq_length. A model type no family
    entry lists (GPT-2, say) is let through with one warning: transformers and peft give its profile."""
    try:
        profile = profile_for(model_config)
    except ModelError as error:
        raise ModelError(
            f"--model_name_or_path '{model_args.model_name_or_path}' cannot be fine-tuned here. {error} Pass a "
            "text encoder's name or directory."
        ) from None
    if family_for(model_config.model_type) is None:
        logger.warning(
            "model_type '%s' (%s) is not one of the encoder families this project supports and tests: its "
            "defaults (LoRA on %s, attention %s, fp16 safety, the FSDP unit) come from transformers and peft and are "
            "untested here. `recipes-lib families` lists the tested ones.",
            model_config.model_type,
            model_args.model_name_or_path,
            ", ".join(profile.lora_targets) or "nothing",
            model_args.attn_implementation or profile.default_attention,
        )
    supported = profile.attention_implementations
    if model_args.attn_implementation is None:
        _say_what_flash_attention_would_change(profile, model_config)
    elif model_args.attn_implementation not in supported:
        raise ModelError(
            f"attn_implementation '{model_args.attn_implementation}' is not supported by {profile.family} "
            f"({model_config.model_type}); it supports: {', '.join(supported)}. Pass one of those, or leave "
            f"the option out to use {profile.default_attention}."
        )
    elif model_args.attn_implementation == FLASH_ATTENTION and not flash_attention_available():
        raise ModelError(
            f"attn_implementation '{FLASH_ATTENTION}' needs a CUDA GPU and the flash-attn package (2.3.3 or "
            f"newer), and this machine has {'no flash-attn' if cuda_available() else 'no CUDA GPU'}. "
            f"{'pip install flash-attn --no-build-isolation, or l' if cuda_available() else 'L'}eave the option "
            f"out to use {profile.default_attention}."
        )
    check_sequence_length(model_config, max_seq_length)
    return profile, model_args.attn_implementation or profile.default_attention


def _say_what_flash_attention_would_change(profile: ArchitectureProfile, model_config) -> None:
    """On a GPU without the flash-attn package, one line for a family that loses much by it."""
    family = family_for(model_config.model_type)
    if (
        family is None
        or family.without_flash_attention is None
        or FLASH_ATTENTION not in profile.attention_implementations
        or profile.default_attention == FLASH_ATTENTION
        or not cuda_available()
    ):
        return
    logger.warning(
        "%s runs %s here: flash-attn is not installed, and %s. pip install flash-attn --no-build-isolation "
        "to train with %s.",
        family.name,
        profile.default_attention,
        family.without_flash_attention,
        FLASH_ATTENTION,
    )


def pad_with_eos_if_missing(tokenizer, model_config) -> None:
    """Give a tokenizer without a padding token (a decoder's: GPT-2, Llama) its end-of-sequence token as
    one, and the model config that id (a decoder's head reads each row's last token that is not padding),
    as transformers' own examples do; say so in one line."""
    if tokenizer.pad_token is not None:
        return
    if tokenizer.eos_token is None:
        raise ModelError(
            f"The tokenizer of '{tokenizer.name_or_path}' has neither a padding token nor an end-of-sequence "
            "token to pad with, and batches are padded to their longest row. Save a copy of the tokenizer with "
            "a padding token (tokenizer.add_special_tokens({'pad_token': '[PAD]'}); tokenizer.save_pretrained(DIR)) "
            "and pass --tokenizer_name DIR, with the model's embeddings resized to the new vocabulary."
        )
    tokenizer.pad_token = tokenizer.eos_token
    model_config.pad_token_id = tokenizer.pad_token_id
    logger.warning(
        "The tokenizer of '%s' has no padding token: padding with its end-of-sequence token %r (id %d), also "
        "the model config's pad_token_id, as transformers' examples do for decoders; both are saved with the model.",
        tokenizer.name_or_path,
        tokenizer.eos_token,
        tokenizer.pad_token_id,
    )


# transformers 5 logs a table of the checkpoint keys a model did not load (its "LOAD REPORT") as a
# warning from this logger (utils/loading_report.py), in red for the head every fine-tune starts.
TRANSFORMERS_LOADING_LOGGER = "transformers.modeling_utils"
LOAD_REPORT_MARK = "LOAD REPORT"
# A key of the encoder's body: in its embeddings or in one of its numbered layers
# ('bert.embeddings.word_embeddings.weight', 'roberta.encoder.layer.3.output.dense.bias').
_BODY_KEY = re.compile(r"(^|\.)(embeddings|\d+)\.")


class HeldLoadReport(logging.Filter):
    """transformers' load report, held back while a model loads, and printed if the block fails: for a
    classifier fine-tuned from an encoder it always lists the new head in a red MISSING table."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.logger = logging.getLogger(TRANSFORMERS_LOADING_LOGGER)

    def __enter__(self) -> HeldLoadReport:
        self.logger.addFilter(self)
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        self.logger.removeFilter(self)  # first: the filter would catch the released records again
        if error_type is not None:
            self.release()

    def filter(self, record: logging.LogRecord) -> bool:
        if LOAD_REPORT_MARK in str(record.msg):
            self.records.append(record)
            return False
        return True

    def release(self) -> None:
        for record in self.records:
            self.logger.handle(record)
        self.records.clear()

    def release_if_the_body_is_affected(self, loading: dict) -> bool:
        """Print the held report (and return True) if a key it lists lies in the encoder's embeddings or
        layers (another architecture's checkpoint, or renamed weights); drop it when every key is outside
        them: the new head and pooler the recipes train, pretraining heads a classifier does not use
        (BERT's `cls.predictions`), heads of another shape (`load_model` reports those itself).
        """
        keys = [
            *(loading.get("missing_keys") or ()),
            *(loading.get("unexpected_keys") or ()),
            *(key for key, *_ in loading.get("mismatched_keys") or ()),
        ]
        if any(_BODY_KEY.search(key) for key in keys):
            self.release()
            return True
        self.records.clear()
        return False


def _summary(keys) -> str:
    """'classifier.weight', 'classifier.bias' -> 'classifier' (the modules that hold the keys)."""
    return ", ".join(sorted({key.rsplit(".", 1)[0] for key in keys}))


def declare_layer_classes(model) -> None:
    """Name the family's layer class (families.py) as the model's `_no_split_modules`: FSDP's auto-wrap
    shards those classes, one unit per encoder layer, unless the accelerate config names its own. What
    transformers gathers there from the submodules would add the embeddings (BERT, RoBERTa, XLM-R, GTE, NomicBERT)."""
    model._no_split_modules = set(profile_for(model.config).layer_classes)


def load_model(model_args: ModelArguments, model_config, **from_pretrained_kwargs):
    """AutoModelForSequenceClassification with a freshly initialised head for this task's labels; the
    modules the checkpoint did not provide in `model.newly_initialized_modules`, for adapters to train and save."""
    if from_pretrained_kwargs.get("quantization_config") is not None:
        import_bitsandbytes()  # QLoRA's base: transformers' quantizer runs it as the weights load
    try:
        with HeldLoadReport() as load_report:
            model, loading = AutoModelForSequenceClassification.from_pretrained(
                resolve_model_path(model_args.model_name_or_path),
                config=model_config,
                cache_dir=model_args.cache_dir,
                revision=model_args.model_revision,
                trust_remote_code=model_args.trust_remote_code,
                attn_implementation=model_args.attn_implementation,
                output_loading_info=True,
                # A checkpoint that is already a classifier (a sentiment model fine-tuned again on other
                # labels) has a head of another shape: it is initialised afresh, like a missing head.
                ignore_mismatched_sizes=True,
                **from_pretrained_kwargs,
            )
    except OSError as error:
        from recipes_lib.modeling.load_failures import not_found

        raise not_found(model_args, error) from None
    # Named as the user named it, not by the pip-installed copy's directory that `resolve_model_path` read it
    # from: peft saves this name as the adapter's base_model_name_or_path, and a path into this machine's
    # site-packages would mean nothing elsewhere (a reload resolves the name again).
    model.name_or_path = model.config.name_or_path = model_args.model_name_or_path
    loading["mismatched_keys"] = [
        *(loading.get("mismatched_keys") or ()),
        *reset_wrong_shaped_linears(model),
    ]
    mismatched = sorted(key for key, *_ in loading["mismatched_keys"])
    if mismatched:
        logger.warning(
            "The checkpoint's %s have another shape than this task needs (%s); they start from fresh "
            "weights, like a new classification head.",
            ", ".join(mismatched),
            ", ".join(
                f"{key} {tuple(old)} -> {tuple(new)}" for key, old, new in sorted(loading["mismatched_keys"])
            ),
        )
    model.newly_initialized_modules = _modules_of(model, [*loading["missing_keys"], *mismatched])
    declare_layer_classes(model)
    if not load_report.release_if_the_body_is_affected(loading):
        # What the report said that matters here, in one line (mismatched keys have their own above).
        if loading["missing_keys"]:
            logger.info("Not in the checkpoint, initialised afresh: %s.", _summary(loading["missing_keys"]))
        if loading.get("unexpected_keys"):
            logger.info(
                "In the checkpoint, not used by this model: %s.", _summary(loading["unexpected_keys"])
            )
    # The head's loss is a mean over the local batch, not a sum over `num_items_in_batch`; without
    # this, any Trainer (seeing **kwargs in forward) multiplies it by the number of processes and
    # skips the division by gradient_accumulation_steps. transformers reads this attribute for it.
    model.accepts_loss_kwargs = False
    if model.config.problem_type == REGRESSION:  # its score is not rounded to bf16 under autocast
        from recipes_lib.modeling.score_head import score_head_in_fp32

        score_head_in_fp32(model)
    return model


def reset_wrong_shaped_linears(model) -> list[tuple[str, tuple, tuple]]:
    """Full-precision linears holding a checkpoint tensor of another shape than the layer declares,
    initialised afresh; (weight name, checkpoint shape, layer shape) for each. transformers before 5.2x
    skips `ignore_mismatched_sizes` under a quantization config (tested on 5.6): a 2-class checkpoint's
    head stayed 2 x hidden under a 1-output regression head. (Quantized linears are packed by design.)
    """
    reset = []
    for name, module in model.named_modules():
        expected = (module.out_features, module.in_features) if type(module) is nn.Linear else None
        if expected is None or tuple(module.weight.shape) == expected:
            continue
        found = tuple(module.weight.shape)
        factory = {"device": module.weight.device, "dtype": module.weight.dtype}
        # As the families initialise a new head: normal(0, initializer_range), zero bias.
        std = getattr(model.config, "initializer_range", 0.02)
        module.weight = nn.Parameter(torch.randn(expected, **factory) * std)
        if module.bias is not None:
            module.bias = nn.Parameter(torch.zeros(expected[0], **factory))
        reset.append((f"{name}.weight", found, expected))
    return reset


def _modules_of(model, parameter_names) -> tuple[str, ...]:
    """The module paths that hold these parameters ('pooler.dense.weight' -> the module 'pooler.dense')."""
    paths = set()
    for name in parameter_names:
        path = name.rsplit(".", 1)[0]
        for candidate in (path, f"{model.base_model_prefix}.{path}"):
            try:
                model.get_submodule(candidate)
            except AttributeError:
                continue
            paths.add(candidate)
            break
    return tuple(sorted(paths))


def count_parameters(model) -> tuple[int, int]:
    """(total, trainable) parameters; shared (tied) tensors counted once, as `parameters()` yields them."""
    total = trainable = 0
    for parameter in model.parameters():
        count = _logical_numel(parameter)
        total += count
        if parameter.requires_grad:
            trainable += count
    return total, trainable


def _logical_numel(parameter) -> int:
    """Elements of the weight the parameter stands for: a bitsandbytes 4-bit weight is stored packed (two
    values per uint8, shape (n/2, 1)); its quant_state remembers the original shape."""
    quant_state = getattr(parameter, "quant_state", None)
    if quant_state is not None and getattr(quant_state, "shape", None) is not None:
        return quant_state.shape.numel()
    return parameter.numel()
