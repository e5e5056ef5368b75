"""The model card's `predict(text)` for a run that read long texts with --long_text head_tail or
sliding_window (card_usage.py, which loads this only then): the same cut, or the same windows pooled
the same way, as data/long_text.py and evaluation/windows.py did in the run."""

from __future__ import annotations

from recipes_lib.config.tasks import REGRESSION, SINGLE_LABEL
from recipes_lib.data.long_text import HEAD_SHARE, SLIDING_WINDOW
from recipes_lib.results import RunResults


def windowed_code(results: RunResults) -> str:
    """`predict(text)`, cutting or windowing as the run did, over the `model` and `tokenizer` loaded above it
    (card_usage.py adds the example call)."""
    config = results.config
    max_length, mode = config["max_seq_length"], config["long_text"]
    if mode == SLIDING_WINDOW:
        stride, pooling = config.get("stride"), config.get("window_pooling") or "mean"
        pooled = "mean(dim=0)" if pooling == "mean" else "amax(dim=0)"
        body = [
            f"    # Windows of {max_length} tokens overlapping by {stride}, as the run read each text;",
            f"    # their logits pooled by their {pooling} (--window_pooling).",
            f"    windows = tokenizer(text, truncation=True, max_length={max_length}, stride={stride},",
            '                        return_overflowing_tokens=True, padding=True, return_tensors="pt")',
            '    windows.pop("overflow_to_sample_mapping")',
            "    with torch.no_grad():",
            f"        logits = model(**windows).logits.float().{pooled}",
        ]
    else:
        body = [
            f"    # The first quarter of the room and the rest from the end, as the run cut texts over {max_length} tokens.",
            "    # The special tokens before and after a text ([CLS] ... [SEP]: 1 and 1), counted as the run did.",
            '    bare, full = tokenizer("long", add_special_tokens=False)["input_ids"], tokenizer("long")["input_ids"]',
            "    before = next(i for i in range(len(full)) if full[i:i + len(bare)] == bare)",
            "    after = len(full) - len(bare) - before",
            '    ids = tokenizer(text)["input_ids"]  # the whole text between its special tokens',
            f"    room = {max_length} - before - after",
            "    text_ids = ids[before:len(ids) - after]",
            "    if len(text_ids) > room:",
            f"        head = int(room * {HEAD_SHARE})",
            "        ids = ids[:before] + text_ids[:head] + text_ids[len(text_ids) - (room - head):] + ids[len(ids) - after:]",
            '    inputs = tokenizer.pad({"input_ids": [ids]}, return_tensors="pt")',
            "    with torch.no_grad():",
            "        logits = model(**inputs).logits.float()[0]",
        ]
    if results.problem_type == REGRESSION:
        answer = "    return float(logits[0])  # the predicted score"
    else:
        squash = "softmax(-1)" if results.problem_type == SINGLE_LABEL else "sigmoid()"
        answer = f"    return {{model.config.id2label[i]: p for i, p in enumerate(logits.{squash}.tolist())}}"
    return "\n".join(
        [
            "def predict(text):",
            f'    """The run\'s prediction for one text (--long_text {mode}): what `recipes-lib predict` gives."""',
            *body,
            answer,
        ]
    )
