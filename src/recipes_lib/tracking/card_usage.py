"""The model card's "How to use": the call that gives the run's own predictions (issues #55 and #58), from
results.json alone: a sentence pair as `{"text": a, "text_pair": b}` (one string is one text, and the
answer differs), a score read unsquashed (`function_to_apply="none"`), each input cut at the run's
max_seq_length (the pipeline otherwise reads up to the model's limit, and fails above it); under
head_tail or sliding_window, the same cut or windows (card_windowed.py). The template lays it out.
"""

from __future__ import annotations

from typing import Any

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.data.long_text import HEAD_TAIL, SLIDING_WINDOW
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


def usage_values(results: RunResults, where: str) -> dict[str, Any]:
    """The template's values: `windowed` (the predict function, or None: the pipeline cuts as the run did),
    and the pipeline code for a saved model (`pipeline`, by name) and for one loaded as `model` and
    `tokenizer` (`loaded_pipeline`)."""
    max_length, mode = _reading(results)
    windowed = None
    if mode in (HEAD_TAIL, SLIDING_WINDOW) and max_length:  # card_windowed.py loads only then
        from recipes_lib.tracking.card_windowed import windowed_code

        windowed = f'{windowed_code(results)}\n\n\npredict("{EXAMPLE_TEXT}")'
    return {
        "windowed": windowed,
        "pipeline": pipeline_code(results, f'model="{where}"'),
        "loaded_pipeline": pipeline_code(results, "model=model, tokenizer=tokenizer"),
        "scores_line": _scores_line(results, windowed),
    }


def _scores_line(results: RunResults, windowed: str | None) -> str:
    """A binary run's class probabilities of one input, for deciding at its threshold."""
    if windowed is not None:
        return "scores = predict(text)"
    given = '{"text": text, "text_pair": text_pair}' if is_pair(results) else "text"
    return f'scores = {{row["label"]: row["score"] for row in classifier([{given}])[0]}}'
