"""A dataset from the Hugging Face Hub (--dataset_name, --dataset_config_name): loaded, and its splits chosen."""

from __future__ import annotations

import datasets
from datasets import DatasetDict

from recipes_lib.config.arguments import DataArguments, dataset_source
from recipes_lib.errors import DataError


def hub_name(data_args: DataArguments) -> str:
    """'glue/sst2', or the name alone for a dataset without configs."""
    name, config = dataset_source(data_args)
    return f"{name}/{config}" if config else name


def read_hub_dataset(data_args: DataArguments, cache_dir: str | None) -> DatasetDict:
    name, config = dataset_source(data_args)
    try:
        loaded = datasets.load_dataset(name, config, cache_dir=cache_dir)
    except Exception as error:
        raise DataError(
            f"Could not load the dataset '{hub_name(data_args)}' from the Hugging Face Hub: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__}. "
            "Check the name and config, your network (HF_HUB_OFFLINE=1 allows only cached datasets), "
            "or train on local files with --train_file and --validation_file."
        ) from None
    return choose_hub_splits(loaded, data_args)


def choose_hub_splits(loaded: DatasetDict, data_args: DataArguments) -> DatasetDict:
    """train, the evaluation split asked for and the test split, if asked for; never a silent hold-out (a
    score on data the user did not choose): without the evaluation split asked for, an error lists the others."""
    source = hub_name(data_args)
    if "train" not in loaded:
        raise DataError(f"The dataset '{source}' has no 'train' split (splits: {', '.join(loaded)}).")
    splits = {"train": loaded["train"]}
    if data_args.validation_split_name in loaded:
        splits["validation"] = loaded[data_args.validation_split_name]
    else:
        others = [split for split in loaded if split not in ("train", data_args.test_split_name)]
        if others:
            raise DataError(
                f"The dataset '{source}' has no '{data_args.validation_split_name}' split to evaluate on; its "
                f"other splits are: {', '.join(others)}. Choose one with --validation_split_name "
                f"(e.g. --validation_split_name {others[0]})."
            )
    if data_args.test_split_name is not None:
        if data_args.test_split_name not in loaded:
            raise DataError(
                f"The dataset '{source}' has no '{data_args.test_split_name}' split (splits: "
                f"{', '.join(loaded)}). Fix --test_split_name."
            )
        splits["test"] = loaded[data_args.test_split_name]
    return DatasetDict(splits)
