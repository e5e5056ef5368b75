"""Tiny randomly initialised encoders, saved like Hub checkpoints, with a WordPiece vocabulary of the test words."""

from __future__ import annotations

from pathlib import Path

from recipes_lib.config import family_registry
from recipes_lib.config.recipe_spec import TrainingShape
from tests.helpers.data import COLOURS, NOISE

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Every family the project supports (config/family_registry.py), by its own model_type.
FAMILIES = tuple(family.model_type for family in family_registry.FAMILIES)
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
# Each family's config, in its own names: 2 layers, hidden 32. A new family adds its line here.
FAMILY_SHAPES = {
    "bert": SMALL,
    "roberta": SMALL,
    "xlm-roberta": SMALL,
    "electra": {**SMALL, "embedding_size": 16},
    "albert": {**SMALL, "embedding_size": 16},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
    # DeBERTa-v1 base: disentangled attention over relative positions.
    "deberta": {
        **SMALL,
        "relative_attention": True,
        "pos_att_type": ["c2p", "p2c"],
        "max_relative_positions": -1,
    },
    # DeBERTa-v3: relative position buckets, shared attention keys, no absolute positions.
    "deberta-v2": {
        **SMALL,
        "relative_attention": True,
        "pos_att_type": ["p2c", "c2p"],
        "position_buckets": 32,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
        "position_biased_input": False,
    },
    "modernbert": {**SMALL, "global_attn_every_n_layers": 2, "local_attention": 16},
    "mpnet": SMALL,
    # XLM-R XL/XXL: XLM-R's embeddings and head around pre-norm layers.
    "xlm-roberta-xl": SMALL,
    # ERNIE 3.0: BERT's layers, task type embeddings beside the token types.
    "ernie": {**SMALL, "use_task_id": True},
    # EuroBERT: Llama's layer, bidirectional; "late" pooling (the head on every token, logits averaged).
    "eurobert": SMALL,
    # GTE (gte-multilingual-base's native conversion) and NomicBERT: rotary, gated FFN, post-norm.
    "gte": SMALL,
    "nomic_bert": SMALL,
}


# Variants the planner checks beside the families (tests/workbench/test_planner_families.py): a family's
# config with more set. DeBERTa-v2 xlarge/xxlarge: a ConvLayer beside the first layer.
PLANNER_VARIANTS = {
    "deberta-v2-conv": ("deberta-v2", {"conv_kernel_size": 3, "conv_act": "gelu"}),
}


def word_vocabulary() -> dict[str, int]:
    """The special tokens, the test words and single characters (for any other word), with their ids."""
    words = sorted(set(COLOURS) | set(NOISE) | set("abcdefghijklmnopqrstuvwxyz0123456789.,!?'"))
    return {token: i for i, token in enumerate(SPECIAL_TOKENS + words)}


def word_tokenizer(vocab: dict[str, int]):
    from transformers import BertTokenizerFast

    # transformers 5 builds the WordPiece tokenizer from a vocab mapping (`vocab_file=` is gone).
    return BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=128)


def token_rows(count: int):
    """A datasets.Dataset of `count` token rows of lengths 2-9 in the word vocabulary, with the
    precomputed `length` column the recipes' tokenizing adds."""
    from datasets import Dataset

    vocab = word_vocabulary()
    cls, word, sep = vocab["[CLS]"], vocab["a"], vocab["[SEP]"]
    lengths = [2 + (i * 7) % 8 for i in range(count)]
    return Dataset.from_dict(
        {
            "input_ids": [[cls] + [word] * (n - 2) + [sep] for n in lengths],
            "attention_mask": [[1] * n for n in lengths],
            "labels": [i % 2 for i in range(count)],
            "length": lengths,
        }
    )


def build_tiny_bert(
    directory: Path, hidden_size: int = 32, layers: int = 2, intermediate_size: int = 64
) -> Path:
    """A randomly initialised BERT (drawn from the global RNG as it stands), saved like a Hub model."""
    from transformers import BertConfig, BertForSequenceClassification

    directory.mkdir(parents=True, exist_ok=True)
    vocab = word_vocabulary()
    tokenizer = word_tokenizer(vocab)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=intermediate_size,
        max_position_embeddings=128,
        # Dropout off: runs are deterministic, so resumed and reloaded models can be compared exactly.
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    BertForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def liven(directory: Path) -> Path:
    """Redraw a saved model's matrices larger than their initialisation (the embeddings aside), so that
    rows get probabilities that differ by around 1e-2: a model that is not this one, or rows in another
    order, cannot agree with it by chance (predict's and export's checks use a 1e-5 tolerance)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(directory)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() == 2 and "embeddings" not in name:
                scale = 0.5 if "classifier" in name else 0.1
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
    model.save_pretrained(directory)
    return directory


def build_tiny_family(model_type: str, directory: Path, **extra) -> Path:
    """A family's base model (no classification head, as a pretrained checkpoint is published), seed 0;
    `extra`: more config values (PLANNER_VARIANTS)."""
    import torch
    from transformers import AutoConfig, AutoModel

    directory.mkdir(parents=True, exist_ok=True)
    vocab = word_vocabulary()
    tokenizer = word_tokenizer(vocab)
    ids = {"pad_token_id": vocab["[PAD]"], "bos_token_id": vocab["[CLS]"], "eos_token_id": vocab["[SEP]"]}
    if model_type == "modernbert":
        ids.update(cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"])
    values = {
        "vocab_size": len(vocab),
        "max_position_embeddings": 130,  # 128 tokens, and RoBERTa-style offsets of up to 2
        **FAMILY_SHAPES[model_type],
        **ids,
    }
    values.update(extra)  # which may set more positions or layers (the long-sequence checks)
    config = AutoConfig.for_model(model_type, **values)
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(directory)
    if not getattr(config, "type_vocab_size", 0):
        tokenizer.model_input_names = ["input_ids", "attention_mask"]  # as the family's own tokenizer does
    tokenizer.save_pretrained(directory)
    return directory


def measured_training_step(
    model_dir: Path, shape: TrainingShape, rows: int, length: int, checkpointing: bool = False
) -> dict:
    """Breakdown and peak of one training step on CPU, measured as a recipe's step is (memory.py).

    A padded batch (the first row half padding), as the recipes' dynamically padded batches are.
    `checkpointing`: activation checkpointing, enabled as the Trainer enables it.
    """
    import torch
    from transformers import AutoConfig, AutoTokenizer

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.memory.tensors import TensorMemoryTracker
    from recipes_lib.modeling.adapters import add_lora
    from recipes_lib.modeling.loading import check_model_support, load_model

    config = AutoConfig.from_pretrained(model_dir, num_labels=2)
    # The family's best kernel, as a recipe's prepare decides it.
    _, attention = check_model_support(ModelArguments(model_name_or_path=str(model_dir)), config, length)
    model_args = ModelArguments(model_name_or_path=str(model_dir), attn_implementation=attention)
    torch.manual_seed(0)
    model = load_model(model_args, config)
    if shape.adapters is not None:
        model = add_lora(model, shape.adapters)
    if checkpointing:
        # transformers 5.23's name, or the one before it (older supported releases).
        enable = (
            getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        )
        enable()
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-3, fused=True)
    generator = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(5, config.vocab_size, (rows, length), generator=generator),
        "attention_mask": torch.ones(rows, length, dtype=torch.long),
        "labels": torch.randint(0, 2, (rows,), generator=generator),
    }
    batch["attention_mask"][0, length // 2 :] = 0
    if "token_type_ids" in AutoTokenizer.from_pretrained(model_dir).model_input_names:
        batch["token_type_ids"] = torch.zeros(rows, length, dtype=torch.long)

    def step():
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # creates the optimizer state
    tracker = TensorMemoryTracker(model, optimizer, batch)
    torch.manual_seed(1)
    with tracker:
        step()
    return {
        **tracker.breakdown_bytes(),
        "peak": tracker.peak_total,
        "trainable": sum(p.numel() for p in trained),
    }


def build_tiny_gpt2(directory: Path) -> Path:
    """A tiny randomly initialised GPT-2 (a decoder, in no family of the registry), saved like a Hub
    checkpoint, with a byte-level tokenizer of single characters that, as GPT-2's own, has an
    end-of-sequence token and no padding token."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    end = "<|endoftext|>"
    # GPT-2's byte-level alphabet writes a space as "Ġ"; printable ASCII stands for itself.
    characters = ["Ġ", *(chr(code) for code in range(ord("!"), ord("~") + 1))]
    vocab = {end: 0, **{character: i + 1 for i, character in enumerate(characters)}}
    tokenizer = GPT2TokenizerFast(vocab=vocab, merges=[], unk_token=end, bos_token=end, eos_token=end)
    config = GPT2Config(
        vocab_size=len(vocab), n_embd=32, n_layer=2, n_head=2, n_positions=128, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def logits(model, tokenizer_dir: Path):
    """The model's logits on two fixed sentences, tokenized by the tokenizer saved in `tokenizer_dir`."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    batch = tokenizer(["the red cat sat on a table", "a blue dog ran"], padding=True, return_tensors="pt")
    model.eval()
    with torch.no_grad():
        return model(**batch).logits.float()
