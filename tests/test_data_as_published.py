"""Sentence-pair and similarity data as published (issue #55): tab-separated `.txt` with a BOM and CRLF line
ends, a header-less file with a bad row under --column_names, one file whose split is a column (SICK's
`SemEval_set`), and whole-number scores, which are read as classes with a hint naming regression.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.loading import load_classification_data
from recipes_lib.errors import ConfigError, DataError
from tests.helpers.data import NOISE


def write_published(path: Path, lines: list[str]) -> Path:
    """Tab-separated, a UTF-8 BOM and CRLF line ends (MRPC's msr_paraphrase_train.txt is written so)."""
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    return path


def pair_lines(count: int, seed: int, score=lambda rng: str(rng.randint(0, 1))) -> list[str]:
    rng = random.Random(seed)
    return [
        "\t".join([score(rng), " ".join(rng.sample(NOISE, 4)), " ".join(rng.sample(NOISE, 5)) + ' "quoted"'])
        for _ in range(count)
    ]


def load(**options) -> object:
    return load_classification_data(DataArguments(**options))


def test_a_tab_separated_txt_with_a_bom_and_crlf_reads_like_a_tsv(tmp_path):
    header = "Quality\t#1 String\t#2 String"
    train = write_published(tmp_path / "msr_paraphrase_train.txt", [header, *pair_lines(20, 1)])
    test = write_published(tmp_path / "msr_paraphrase_test.txt", [header, *pair_lines(8, 2)])
    data = load(
        train_file=str(train), validation_file=str(test), label_column_name="Quality",
        text_column_names="#1 String,#2 String",
    )  # fmt: skip
    assert data.raw["train"].column_names == ["Quality", "#1 String", "#2 String"]  # no BOM in the first name
    assert len(data.raw["train"]) == 20 and len(data.raw["validation"]) == 8
    assert data.raw["train"][0]["#2 String"].endswith('"quoted"')  # GLUE-style: a quote is text


def test_with_column_names_a_row_of_another_width_is_named_by_its_line_not_by_the_option(tmp_path):
    lines = pair_lines(30, 1)
    lines[20] += "\textra\tfields"
    path = write_published(tmp_path / "rows.txt", lines)
    with pytest.raises(DataError) as error:
        load(train_file=str(path), column_names="label,first,second", text_column_names="first,second")
    message = str(error.value)
    assert "line 21 is the first row with 5 fields" in message
    assert "--column_names names 3 fields" in message
    assert "give its" not in message and "--column_names (e.g." not in message  # given already
    with pytest.raises(DataError) as error:
        load(train_file=str(path), column_names="label,first,second", csv_quoting="none")
    assert "line 21 does not have the 3 fields --column_names names (5 fields)" in str(error.value)
    assert "give its" not in str(error.value)


def sick_lines() -> list[str]:
    """SICK's layout: pair id, two sentences, relatedness score, and the split as a column, as written."""
    rng = random.Random(0)
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tSemEval_set"
    splits = ["TRAIN"] * 20 + ["TRIAL"] * 6 + ["TEST"] * 8 + ["train"] * 2
    return [header] + [
        f"{index}\t{' '.join(rng.sample(NOISE, 4))}\t{' '.join(rng.sample(NOISE, 4))}\t{rng.uniform(1, 5):.2f}\t{split}"
        for index, split in enumerate(splits)
    ]


def test_a_split_column_gives_train_validation_and_test(tmp_path):
    path = write_published(tmp_path / "SICK.txt", sick_lines())
    data = load(
        train_file=str(path), split_column="SemEval_set", label_column_name="relatedness_score",
        text_column_names="sentence_A,sentence_B",
    )  # fmt: skip
    assert {split: len(rows) for split, rows in data.raw.items()} == {"train": 22, "validation": 6, "test": 8}
    assert set(data.raw["validation"]["SemEval_set"]) == {"TRIAL"}
    assert data.split_sources["validation"] == "SICK.txt, SemEval_set TRIAL"
    assert data.labels.problem_type == "regression" and data.test_has_labels


def test_a_split_value_no_spelling_names_is_an_error_naming_it_and_its_line(tmp_path):
    lines = sick_lines()
    lines[5] = lines[5].replace("TRAIN", "HOLDOUT")
    path = write_published(tmp_path / "SICK.txt", lines)
    with pytest.raises(
        DataError, match=r"holds 'HOLDOUT', which name\(s\) no split \(first at SICK.txt line 6\)"
    ):
        load(train_file=str(path), split_column="SemEval_set", label_column_name="relatedness_score")
    with pytest.raises(ConfigError, match="--validation_file also name"):
        load(train_file=str(path), validation_file=str(path), split_column="SemEval_set")


# 5-class stars (1-5, SST-5's 0-4) and TREC's 0-5 are ordinary classes: no hint; 1-10 and 0-100 (here in tens) may be scores.
@pytest.mark.parametrize(
    ("values", "hinted"),
    [
        (range(1, 11), True),
        (range(0, 101, 10), True),
        (range(1, 6), False),
        (range(0, 6), False),
        (range(3), False),
    ],
)
def test_whole_number_scores_of_many_values_get_a_hint_naming_regression(values, hinted, tmp_path, caplog):
    score = lambda rng: str(rng.choice(list(values)))  # noqa: E731
    path = write_published(tmp_path / "scores.txt", ["score\ta\tb", *pair_lines(40, 1, score)])
    with caplog.at_level(logging.WARNING):
        data = load(train_file=str(path), label_column_name="score", text_column_names="a,b")
    assert data.labels.problem_type == "single_label_classification"
    hint = [
        record.getMessage() for record in caplog.records if "--problem_type regression" in record.getMessage()
    ]
    assert bool(hint) == hinted
    if values == range(1, 11):
        assert hint == [
            "The labels are whole numbers of 10 values, 1 to 10: read as 10 classes, their order ignored "
            "(single-label classification). If they are scores on a scale, give --problem_type regression."
        ]
