"""Split the demo's training set for `make distill-demo`: a small labelled set and unlabelled rest.

    python data/make_distill_split.py      # rewrites data/support_tickets_distill/

data/support_tickets/train.csv (1,200 rows, 300 per team) becomes
    data/support_tickets_distill/train_labelled.csv    its first LABELLED rows, text and label
    data/support_tickets_distill/transfer.csv          the other rows, text only (no label column)
The first 100 rows hold every team (technical 30, billing 28, account 21, shipping 21). A student
trains on the first file alone, or on both with the teacher labelling the second (--transfer_file);
validation stays data/support_tickets/validation.csv. Written with Python's csv module, quoted as
the source is; the output is deterministic.
"""

from __future__ import annotations

import csv
from pathlib import Path

LABELLED = 100
SOURCE = Path(__file__).parent / "support_tickets" / "train.csv"
TARGET = Path(__file__).parent / "support_tickets_distill"


def main() -> None:
    with SOURCE.open(newline="") as source:
        rows = list(csv.DictReader(source))
    TARGET.mkdir(exist_ok=True)
    with (TARGET / "train_labelled.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(rows[:LABELLED])
    with (TARGET / "transfer.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["text"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows[LABELLED:])
    print(f"{TARGET}: {LABELLED} labelled rows, {len(rows) - LABELLED} unlabelled")


if __name__ == "__main__":
    main()
