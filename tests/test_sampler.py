"""The default training order: length-grouped batches (little padding), shuffled, seeded per epoch."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
import torch
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

from recipes_lib.training.trainer import ShuffledLengthGroupedSampler

STEP = 8


def lengths(count: int = 1000, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(2, 60) for _ in range(count)]


def sampler(
    example_lengths: list[int], seed: int = 42, step: int = STEP, grouping: str = "wide"
) -> ShuffledLengthGroupedSampler:
    return ShuffledLengthGroupedSampler(example_lengths, step, seed, grouping=grouping)


def groups(order: list[int], step: int = STEP) -> list[list[int]]:
    return [order[start : start + step] for start in range(0, len(order), step)]


def stock_grouping(example_lengths: list[int], step: int, mega_batch_steps: int, seed: int = 42) -> list[int]:
    """transformers' own length grouping at a given mega-batch size, with the sampler's generator."""
    generator = torch.Generator().manual_seed(seed)
    return get_length_grouped_indices(example_lengths, step, mega_batch_steps, generator)


def pad_ratio(example_lengths: list[int], order: list[int], step: int) -> float:
    """Padding tokens / all tokens when every group is padded to its longest example."""
    padded = real = 0
    for group in groups(order, step):
        group_lengths = [example_lengths[i] for i in group]
        padded += max(group_lengths) * len(group_lengths)
        real += sum(group_lengths)
    return 1 - real / padded


def sentence_lengths(count: int, seed: int = 0) -> list[int]:
    """Token counts shaped like short-text classification data (SST-2: a long right tail)."""
    rng = random.Random(seed)
    return [min(128, max(3, round(rng.lognormvariate(2.8, 0.6)))) for _ in range(count)]


def test_every_example_once_in_groups_sorted_over_fifty_steps_or_the_whole_epoch():
    example_lengths = lengths()
    ours = list(sampler(example_lengths))
    assert sorted(ours) == list(range(len(example_lengths)))
    # 1,000 examples are 125 steps of 8: mega-batches of 50 steps, sorted by transformers' own
    # grouping function with the same generator; the groups are the same, only reordered.
    assert sampler(example_lengths).mega_batch_steps == 50
    stock = stock_grouping(example_lengths, STEP, 50)
    assert sorted(map(sorted, groups(ours))) == sorted(map(sorted, groups(stock)))
    # An epoch shorter than 50 steps is sorted as one mega-batch.
    assert sampler(example_lengths, step=32).mega_batch_steps == 32  # ceil(1000 / 32)


def test_small_data_pads_as_little_as_large_data():
    """1,000 examples in batches of 32: the stock sampler sorts 7 batches at a time, drawn from the
    whole length range; sorted over the whole epoch, padding is as low as with 16,000 examples."""
    step = 32
    small, large = sentence_lengths(1000), sentence_lengths(16000, seed=1)
    ours_small = pad_ratio(small, list(sampler(small, step=step)), step)
    ours_large = pad_ratio(large, list(sampler(large, step=step)), step)
    stock_small = pad_ratio(
        small,
        list(LengthGroupedSampler(step, lengths=small, generator=torch.Generator().manual_seed(42))),
        step,
    )
    assert ours_small < 0.5 * stock_small
    assert ours_small <= ours_large + 0.02


def test_batch_members_are_drawn_afresh_each_epoch():
    example_lengths = sentence_lengths(1000)
    order = sampler(example_lengths, step=32)
    epoch_0 = {frozenset(group) for group in groups(list(order), 32)}
    order.set_epoch(1)
    epoch_1 = {frozenset(group) for group in groups(list(order), 32)}
    # Examples of equal length land in other batches: most batches change members.
    assert len(epoch_0 & epoch_1) < 0.5 * len(epoch_0)


def test_stock_grouping_keeps_the_groups_transformers_sampler_makes():
    """--length_grouping stock: the stock sampler's mega-batches (7 batches of 32 at 1,000 examples),
    only in shuffled order."""
    example_lengths = sentence_lengths(1000)
    ours = list(sampler(example_lengths, step=32, grouping="stock"))
    assert sorted(ours) == list(range(1000))
    stock = LengthGroupedSampler(32, lengths=example_lengths, generator=torch.Generator().manual_seed(42))
    assert sorted(map(sorted, groups(ours, 32))) == sorted(map(sorted, groups(list(stock), 32)))
    wide = list(sampler(example_lengths, step=32))
    assert pad_ratio(example_lengths, wide, 32) < 0.5 * pad_ratio(example_lengths, ours, 32)


def test_an_unknown_grouping_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="length_grouping is 'whole'; use one of wide, stock"):
        sampler(lengths(), grouping="whole")


def test_groups_come_in_random_order_not_longest_to_shortest():
    example_lengths = lengths()
    group_maxima = [
        max(example_lengths[i] for i in group) for group in groups(list(sampler(example_lengths)))
    ]
    stock_order = stock_grouping(example_lengths, STEP, 50)
    stock_maxima = [max(example_lengths[i] for i in group) for group in groups(stock_order)]
    # Emitted as grouped, each mega-batch of 50 groups is one sorted sweep from long to short
    # (group 0 swaps its longest example for the overall longest, so start at 1).
    assert all(a >= b for a, b in pairwise(stock_maxima[1:50]))
    ours_descents = sum(a >= b for a, b in pairwise(group_maxima[1:]))
    assert ours_descents < 0.75 * (len(group_maxima) - 2)  # random order: about half


def test_longest_example_first_and_incomplete_group_last():
    example_lengths = lengths(1003)  # 125 full groups of 8, then 3 examples
    order = list(sampler(example_lengths))
    assert max(example_lengths[i] for i in order[:STEP]) == max(example_lengths)
    stock = stock_grouping(example_lengths, STEP, 50)
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
    stock = stock_grouping(example_lengths, step, 32)  # 1,024 / 32 = 32 steps: one mega-batch
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


def test_full_model_recipes_group_wide_and_the_adapters_stock_unless_told():
    """The defaults per recipe (recipes_workbench/recipes.py says why), and a YAML key or flag overrides them."""
    from recipes_lib.config.parsing import parse_arguments
    from recipes_workbench.recipes import RECIPES

    chosen = {name: parse_arguments(spec, []).training.length_grouping for name, spec in RECIPES.items()}
    assert chosen == {
        "full_ft": "wide",
        "adamw_8bit": "wide",
        "lora": "stock",
        "qlora": "stock",
        "distill": "wide",
    }
    assert parse_arguments(RECIPES["lora"], ["--length_grouping", "wide"]).training.length_grouping == "wide"
