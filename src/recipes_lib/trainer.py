"""The Trainer every recipe uses: the stock Trainer plus token accounting and length grouping."""

from __future__ import annotations

import torch
from transformers import Trainer


class RecipeTrainer(Trainer):
    """Counts real and padded tokens in training batches, for tokens/s and the pad ratio.

    Counting happens in `training_step`, in the training process itself (dataloader workers would
    lose the counts), and costs two reductions of the attention mask per micro-batch.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.real_tokens_seen = 0
        self.padded_tokens_seen = 0

    def training_step(self, model, inputs, num_items_in_batch=None):
        attention_mask = inputs.get("attention_mask")
        if attention_mask is not None:
            self.real_tokens_seen += int(attention_mask.sum())
            self.padded_tokens_seen += attention_mask.numel()
        return super().training_step(model, inputs, num_items_in_batch)

    def _get_train_sampler(self, train_dataset=None):
        # The Trainer drops unused columns before building the sampler, which throws away the
        # precomputed `length` column; the length-grouped sampler would then re-read every example
        # to measure it. The rows are the same, so hand it the dataset that still has the column.
        if self.args.train_sampling_strategy == "group_by_length" and self.train_dataset is not None:
            train_dataset = self.train_dataset
        return super()._get_train_sampler(train_dataset)

    def token_counts(self) -> tuple[int, int]:
        """(real tokens, all tokens) over every process's training batches."""
        counts = torch.tensor([self.real_tokens_seen, self.padded_tokens_seen], device=self.args.device)
        counts = self.accelerator.reduce(counts, reduction="sum")
        return int(counts[0]), int(counts[1])
