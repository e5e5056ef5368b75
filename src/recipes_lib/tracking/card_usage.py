"""The model card's "How to use": the call that gives the run's own predictions (issues #55 and #58).

The saved model answers as the run evaluated it only when it is called as the run read its inputs:
a sentence pair as `{"text": a, "text_pair": b}` (one string is one text, and the answer differs),
a score read unsquashed (`function_to_apply="none"`), each input cut at the run's max_seq_length
(the pipeline otherwise reads up to the model's limit, and fails above it), and under head_tail or
sliding_window the same cut or the same windows pooled the same way (data/long_text.py,
evaluation/windows.py). This module writes that code from results.json alone; the template lays it out.
"""

from __future__ import annotations

from typing import Any

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.data.long_text import HEAD_SHARE, HEAD_TAIL, SLIDING_WINDOW
from recipes_lib.results import RunResults

FUNCTIONS = {SINGLE_LABEL: "softmax", MULTI_LABEL: "sigmoid", REGRESSION: "none"}
EXAMPLE_TEXT = "an example text"


def is_pair(results: RunResults) -> bool:
    return len(results.text_columns or ()) == 2


def _reading(results: RunResults) -> tuple[int | None, str]:
    config = results.config or {}
    return config.get("max_seq_length"), config.get("long_text") or "truncate"


def _example(results: RunResults) -> str:
    """The inputs of the example call: texts, or pairs as the pipeline takes them, named by their columns."""
    if is_pair(results):
        first, second = results.text_columns
        return f'[{{"text": "the {first}", "text_pair": "the {second}"}}]'
    return f'["{EXAMPLE_TEXT}"]'


def pipeline_code(results: RunResults, model: str) -> str:
    """The pipeline and its example call; `model` is the pipeline's model argument, as code."""
    max_length, _ = _reading(results)
    cut = f", truncation=True, max_length={max_length}" if max_length else ""
    function = FUNCTIONS[results.problem_type]
    if results.problem_type == REGRESSION:
        shown = 'outputs[0][0]["score"]  # the predicted score: the model\'s single output, not squashed'
    else:
        shown = "outputs[0]  # each label with its probability, the most likely first"
    lines = [
        f'classifier = pipeline("text-classification", {model}, function_to_apply="{function}", top_k=None{cut})',
    ]
    if max_length:
        pair = " (of a pair, the longer text is cut first)" if is_pair(results) else ""
        lines.append(
            f"# truncation and max_length: the run read at most {max_length} tokens of each input{pair};"
            " without them the pipeline reads up to the model's limit, and fails on longer inputs."
        )
    if is_pair(results):
        lines.append(
            "# A pair is one input: {'text': first, 'text_pair': second}, as the run read its two columns."
        )
    lines += [f"outputs = classifier({_example(results)})", shown]
    return "\n".join(lines)


def windowed_code(results: RunResults) -> str | None:
    """Under head_tail or sliding_window: `predict(text)`, cutting or windowing as the run did, over the
    `model` and `tokenizer` loaded above it; None for a truncating run (the pipeline does it)."""
    max_length, mode = _reading(results)
    if mode not in (HEAD_TAIL, SLIDING_WINDOW) or not max_length:
        return None
    config = results.config or {}
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
            "",
            "",
            f'predict("{EXAMPLE_TEXT}")',
        ]
    )


def usage_values(results: RunResults, where: str) -> dict[str, Any]:
    """The template's values: `windowed` (the predict function, or None), and the pipeline code for a
    saved model (`pipeline`, by name) and for one loaded as `model` and `tokenizer` (`loaded_pipeline`)."""
    return {
        "windowed": windowed_code(results),
        "pipeline": pipeline_code(results, f'model="{where}"'),
        "loaded_pipeline": pipeline_code(results, "model=model, tokenizer=tokenizer"),
        "scores_line": _scores_line(results),
    }


def _scores_line(results: RunResults) -> str:
    """A binary run's class probabilities of one input, for deciding at its threshold."""
    if windowed_code(results) is not None:
        return "scores = predict(text)"
    given = '{"text": text, "text_pair": text_pair}' if is_pair(results) else "text"
    return f'scores = {{row["label"]: row["score"] for row in classifier([{given}])[0]}}'
