"""Logits of a trained model on tokenized rows, outside the Trainer: for predict and the merged-model check."""

from __future__ import annotations

import torch


def batch_logits(model, encoded, collator, device, batch_size: int, progress: bool = True):
    """The model's logits for tokenized rows, in input order, batched by `collator` on `device`; columns the
    model does not take (the label, the text) dropped first, by the tokenizer's `model_input_names`."""
    from torch.utils.data import DataLoader
    from tqdm.auto import tqdm

    model_inputs = collator.tokenizer.model_input_names
    encoded = encoded.remove_columns([c for c in encoded.column_names if c not in model_inputs])
    loader = DataLoader(encoded, batch_size=batch_size, shuffle=False, collate_fn=collator)
    logits = []
    with torch.inference_mode():
        for batch in tqdm(loader, desc="Predicting", unit="batch", disable=not progress):
            batch = {key: value.to(device) for key, value in batch.items()}
            logits.append(model(**batch).logits.float().cpu())
    return torch.cat(logits).numpy()
