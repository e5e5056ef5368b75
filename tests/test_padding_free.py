"""Padding-free batches (benchmarks/padding_free_model.py): a packed row gives each family's classifier the
logits, loss and gradients of the padded batch, with the reference attention (eager, fp32) as the
padded side. The CUDA kernels (flash / memory-efficient jagged SDPA, varlen_attn) run in
benchmarks/gpu_check.py; here the CPU's math path runs the same code."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.models import FAMILY_SHAPES
from tests.helpers.repo import load_benchmark

padding_free = load_benchmark("padding_free_model")
PaddingFreeCollator = padding_free.PaddingFreeCollator
enable_padding_free = padding_free.enable_padding_free
padding_free_applies = padding_free.padding_free_applies
position_offset = padding_free.position_offset
resolve_padding_free = padding_free.resolve_padding_free

PACKED_FAMILIES = ("bert", "roberta", "xlm-roberta", "electra", "albert", "distilbert", "modernbert")
# 31 is longer than ModernBERT's local window here (local_attention 16: 8 each side), so its local
# layers take the windowed path; 1 is a row of one token.
LENGTHS = (5, 31, 12, 1, 17)
LABELS = 3


def tiny_classifier(model_type: str, **extra):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    config = AutoConfig.for_model(
        model_type,
        vocab_size=60,
        max_position_embeddings=130,
        pad_token_id=0,
        num_labels=LABELS,
        **FAMILY_SHAPES[model_type],
        **extra,
    )
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(config, attn_implementation="eager").eval()


def rows_for(config) -> list[dict]:
    generator = torch.Generator().manual_seed(1)
    rows = []
    for index, length in enumerate(LENGTHS):
        row = {
            "input_ids": torch.randint(1, 60, (length,), generator=generator).tolist(),
            "label": index % LABELS,
        }
        if getattr(config, "type_vocab_size", 0) > 1:  # a second segment: token types 1 from the middle
            row["token_type_ids"] = [0] * (length // 2) + [1] * (length - length // 2)
        rows.append(row)
    return rows


def padded(rows: list[dict]) -> dict:
    longest = max(len(row["input_ids"]) for row in rows)
    batch = {"input_ids": torch.zeros(len(rows), longest, dtype=torch.long)}
    batch["attention_mask"] = torch.zeros_like(batch["input_ids"])
    if "token_type_ids" in rows[0]:
        batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
    for index, row in enumerate(rows):
        length = len(row["input_ids"])
        batch["input_ids"][index, :length] = torch.tensor(row["input_ids"])
        batch["attention_mask"][index, :length] = 1
        if "token_type_ids" in row:
            batch["token_type_ids"][index, :length] = torch.tensor(row["token_type_ids"])
    batch["labels"] = torch.tensor([row["label"] for row in rows])
    return batch


def logits_loss_gradients(model, batch):
    model.zero_grad()
    output = model(**batch)
    output.loss.backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return output.logits.detach(), output.loss.detach(), gradients


@pytest.mark.parametrize("model_type", PACKED_FAMILIES)
def test_a_packed_batch_gives_the_padded_batch_logits_loss_and_gradients(model_type):
    model = tiny_classifier(model_type)
    rows = rows_for(model.config)
    logits, loss, gradients = logits_loss_gradients(model, padded(rows))

    enable_padding_free(model)
    packed = PaddingFreeCollator(position_offset(model.config))(rows)
    assert packed["input_ids"].shape == (1, sum(LENGTHS))  # one row, no padding
    packed_logits, packed_loss, packed_gradients = logits_loss_gradients(model, packed)

    assert packed_logits.shape == (len(LENGTHS), LABELS)
    torch.testing.assert_close(packed_logits, logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(packed_loss, loss, rtol=1e-5, atol=1e-6)
    assert packed_gradients.keys() == gradients.keys()
    for name, gradient in gradients.items():
        torch.testing.assert_close(packed_gradients[name], gradient, rtol=1e-4, atol=1e-6, msg=name)

    # The same model still takes padded batches (evaluation and predict pad): SDPA with their mask.
    torch.testing.assert_close(logits_loss_gradients(model, padded(rows))[0], logits, rtol=1e-5, atol=1e-6)


def test_rows_do_not_see_each_other():
    """A row's logits do not move when another row of its packed batch changes."""
    model = tiny_classifier("distilbert")  # its mask ignores position_ids: only the boundaries separate rows
    enable_padding_free(model)
    rows = rows_for(model.config)
    collate = PaddingFreeCollator()
    before = model(**collate(rows)).logits
    rows[1]["input_ids"] = [7] * len(rows[1]["input_ids"])
    after = model(**collate(rows)).logits
    torch.testing.assert_close(after[[0, 2, 3, 4]], before[[0, 2, 3, 4]])
    assert not torch.allclose(after[1], before[1])


def test_the_collator_numbers_each_row_from_its_first_position_and_keeps_one_label_per_row():
    rows = [{"input_ids": [5, 6, 7], "label": 1}, {"input_ids": [8, 9], "label": 0}]
    batch = PaddingFreeCollator(first_position=2)(rows)  # RoBERTa's: padding_idx + 1
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert batch["position_ids"].tolist() == [[2, 3, 4, 2, 3]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5] and batch["max_length_q"] == 3
    assert batch["labels"].tolist() == [1, 0]
    assert "attention_mask" not in batch


@pytest.mark.parametrize(
    ("model_type", "extra", "why"),
    [
        ("deberta-v2", {}, "deberta-v2's attention does not take packed rows"),
        ("mpnet", {}, "mpnet's attention does not take packed rows"),
        ("modernbert", {"classifier_pooling": "mean"}, "classifier_pooling 'mean' averages over the padding"),
    ],
)
def test_families_whose_attention_or_head_cannot_take_packed_rows_are_refused(model_type, extra, why):
    model = tiny_classifier(model_type, **extra)
    assert padding_free_applies(model.config).startswith(why)
    with pytest.raises(ValueError, match="Leave padding_free off"):
        enable_padding_free(model)


def test_padding_free_is_on_by_default_on_cuda_where_it_applies_and_asked_for_elsewhere():
    from transformers import AutoConfig

    bert, deberta = AutoConfig.for_model("bert"), AutoConfig.for_model("deberta-v2")
    assert resolve_padding_free(None, bert, "cuda") is True
    assert resolve_padding_free(None, bert, "cpu") is False
    assert resolve_padding_free(None, deberta, "cuda") is False  # the default never refuses
    assert resolve_padding_free(True, bert, "cpu") is True
    assert resolve_padding_free(False, bert, "cuda") is False
    with pytest.raises(ValueError, match="deberta-v2's attention does not take packed rows"):
        resolve_padding_free(True, deberta, "cuda")
