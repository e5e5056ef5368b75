"""The default training order: length-grouped batches (little padding), shuffled, seeded per epoch."""

from __future__ import annotations

import random
from itertools import pairwise

import torch
from transformers.trainer_pt_utils import LengthGroupedSampler

from recipes_lib.training.trainer import ShuffledLengthGroupedSampler

STEP = 8


def lengths(count: int = 1000, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(2, 60) for _ in range(count)]


def sampler(example_lengths: list[int], seed: int = 42, step: int = STEP) -> ShuffledLengthGroupedSampler:
    return ShuffledLengthGroupedSampler(example_lengths, step, seed)


def groups(order: list[int], step: int = STEP) -> list[list[int]]:
    return [order[start : start + step] for start in range(0, len(order), step)]


def test_every_example_once_in_groups_the_stock_sampler_made():
    example_lengths = lengths()
    ours = list(sampler(example_lengths))
    assert sorted(ours) == list(range(len(example_lengths)))
    # Same groups as the stock sampler with the same generator: as little padding, only reordered.
    stock = LengthGroupedSampler(STEP, lengths=example_lengths, generator=torch.Generator().manual_seed(42))
    assert sorted(map(sorted, groups(ours))) == sorted(map(sorted, groups(list(stock))))


def test_groups_come_in_random_order_not_longest_to_shortest():
    example_lengths = lengths()
    group_maxima = [
        max(example_lengths[i] for i in group) for group in groups(list(sampler(example_lengths)))
    ]
    stock_order = list(
        LengthGroupedSampler(STEP, lengths=example_lengths, generator=torch.Generator().manual_seed(42))
    )
    stock_maxima = [max(example_lengths[i] for i in group) for group in groups(stock_order)]
    # The stock order: 1,000 examples make mega-batches of 31 groups, each one sorted sweep from
    # long to short (group 0 swaps its longest example for the overall longest, so start at 1).
    assert all(a >= b for a, b in pairwise(stock_maxima[1:31]))
    ours_descents = sum(a >= b for a, b in pairwise(group_maxima[1:]))
    assert ours_descents < 0.75 * (len(group_maxima) - 2)  # random order: about half


def test_longest_example_first_and_incomplete_group_last():
    example_lengths = lengths(1003)  # 125 full groups of 8, then 3 examples
    order = list(sampler(example_lengths))
    assert max(example_lengths[i] for i in order[:STEP]) == max(example_lengths)
    stock = list(
        LengthGroupedSampler(STEP, lengths=example_lengths, generator=torch.Generator().manual_seed(42))
    )
    assert sorted(order[-3:]) == sorted(stock[-3:])


def test_order_depends_only_on_seed_and_epoch():
    example_lengths = lengths()
    first, again, other_seed = (
        sampler(example_lengths),
        sampler(example_lengths),
        sampler(example_lengths, seed=7),
    )
    torch.manual_seed(123)  # the global RNG plays no part
    assert list(first) == list(again)
    assert list(first) != list(other_seed)
    first.set_epoch(1)
    epoch_1 = list(first)
    assert epoch_1 != list(again)
    again.set_epoch(1)
    torch.manual_seed(999)
    assert list(again) == epoch_1


def test_one_optimizer_step_is_the_unit_under_accumulation_and_several_processes():
    # Batch 8 x 2 accumulation steps x 2 processes = 32 examples per optimizer step: grouped from
    # one sorted stretch of the stock order built at that size, and kept together when shuffled.
    example_lengths = lengths(1024)
    step = 8 * 2 * 2
    order = list(sampler(example_lengths, step=step))
    stock = list(
        LengthGroupedSampler(step, lengths=example_lengths, generator=torch.Generator().manual_seed(42))
    )
    assert sorted(map(sorted, groups(order, step))) == sorted(map(sorted, groups(stock, step)))
    assert order[:step] == stock[:step]  # the longest example's step first


def test_the_trainer_gives_the_sampler_each_epoch_itself():
    """accelerate's set_epoch misses the sampler of a multi-process run resumed mid-epoch
    (SkipBatchSampler(BatchSamplerShard(...))); RecipeTrainer's SamplerEpoch callback sets it as each
    epoch begins (tests/test_trainer_surface.py runs it in a real Trainer)."""
    from transformers import TrainerState

    from recipes_lib.training.trainer import SamplerEpoch

    callback, state = SamplerEpoch(), TrainerState()
    callback.sampler = sampler(lengths())
    epochs_seen = []
    callback.on_train_begin(None, state, None)
    for _ in range(3):
        callback.on_epoch_begin(None, state, None)
        epochs_seen.append(callback.sampler.epoch)
    assert epochs_seen == [0, 1, 2]
