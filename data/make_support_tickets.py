"""Write the demo dataset: short customer-support messages labelled with the team that should answer.

    python data/make_support_tickets.py      # rewrites data/support_tickets/{train,validation}.csv

The project wrote every phrase below. Four string labels (billing, shipping, technical, account).
The task is made deliberately not trivial: validation messages use requests that training never
shows, every class shares the same products, the same opening
and closing remarks, and the same moods, and many messages carry a distracting clause that names
another team's topic ("I already reset my password, but ..."), so a model has to find which part
of the message is the request. The output is deterministic (fixed seed).
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

PRODUCTS = [
    "the blender",
    "my headphones",
    "the standing desk",
    "the coffee grinder",
    "the smart lamp",
    "my phone case",
    "the yoga mat",
    "the air purifier",
    "the kettle",
    "the gaming chair",
    "the backpack",
    "the rice cooker",
    "the keyboard",
    "the monitor arm",
    "the water bottle",
]
OPENINGS = [
    "",
    "Hi,",
    "Hello team,",
    "Hey,",
    "Good morning,",
    "Quick question:",
    "Not happy right now.",
    "Sorry to bother you again,",
    "Third message about this:",
    "Hi there, hope you are well.",
]
CLOSINGS = [
    "",
    "Thanks.",
    "Please help.",
    "Can someone look into it?",
    "This is urgent.",
    "Cheers.",
    "I have been a customer for years.",
    "Let me know what you need from me.",
    "Thank you in advance.",
]
# Clauses that mention another team's topic; they open the message and are not the request.
DISTRACTORS = {
    "billing": [
        "I already paid the invoice,",
        "the refund for my last order arrived fine,",
        "my card works everywhere else,",
        "the price was fine,",
    ],
    "shipping": [
        "the parcel arrived on time,",
        "delivery was quick as usual,",
        "the courier was friendly,",
        "the tracking page says delivered,",
    ],
    "technical": [
        "the app works fine otherwise,",
        "I updated the firmware last week,",
        "the device itself works,",
        "I reinstalled the app yesterday,",
    ],
    "account": [
        "I can log in fine,",
        "I already reset my password,",
        "my profile details are correct,",
        "my email address is verified,",
    ],
}
REQUESTS = {
    "billing": [
        "I was charged twice for {p}",
        "the refund for {p} never reached my card",
        "why does my invoice for {p} show a higher price than the checkout page",
        "the discount code was not applied when I paid for {p}",
        "I need a VAT invoice for {p}",
        "my card was billed for {p} after I cancelled the order",
        "the subscription fee went up without notice",
        "I want my money back for {p}",
        "the payment for {p} failed but the money left my account",
        "please split the payment for {p} into instalments",
        "there is a charge on my statement I do not recognise",
        "can you refund the shipping fee I paid on {p}",
    ],
    "shipping": [
        "{p} has not arrived after two weeks",
        "the tracking number for {p} does not work",
        "{p} was delivered to the wrong address",
        "the box with {p} arrived crushed",
        "can I change the delivery address for {p}",
        "the courier left {p} outside in the rain",
        "only half of my order arrived, {p} is missing",
        "when will {p} be dispatched",
        "I need {p} delivered before Friday",
        "the parcel with {p} is stuck at customs",
        "the delivery of {p} keeps getting rescheduled",
        "{p} was sent to a pickup point I never chose",
    ],
    "technical": [
        "{p} will not turn on",
        "the app crashes whenever I connect {p}",
        "{p} makes a grinding noise after a few minutes",
        "the bluetooth pairing with {p} keeps failing",
        "{p} stopped charging",
        "the firmware update bricked {p}",
        "{p} overheats after ten minutes",
        "the display on {p} flickers",
        "the buttons on {p} stopped responding",
        "{p} disconnects from wifi every hour",
        "the timer on {p} resets itself",
        "the app shows an error code E42 for {p}",
    ],
    "account": [
        "I cannot log in to my account",
        "the password reset email never arrives",
        "please delete my account and my data",
        "I want to change the email on my account",
        "my account was locked after too many attempts",
        "someone else logged in to my account",
        "I cannot turn off two-factor authentication",
        "how do I merge my two accounts",
        "my order history for {p} disappeared from my profile",
        "I want to update my phone number",
        "the site says my username is already taken",
        "please unsubscribe me from the newsletter",
    ],
}
LABELS = sorted(REQUESTS)
# The last requests of each class appear only in validation: the model must generalise from what
# the words mean (where the pretrained encoder helps), not memorise the training phrasings.
HELD_OUT_PER_CLASS = 4


def make_message(rng: random.Random, label: str, held_out: bool) -> str:
    requests = REQUESTS[label][-HELD_OUT_PER_CLASS:] if held_out else REQUESTS[label][:-HELD_OUT_PER_CLASS]
    request = rng.choice(requests).format(p=rng.choice(PRODUCTS))
    parts = [rng.choice(OPENINGS)]
    # Half the messages open with another team's topic, the hard part of the task.
    if rng.random() < 0.5:
        other = rng.choice([name for name in LABELS if name != label])
        parts.append(rng.choice(DISTRACTORS[other]) + " but")
    parts.append(request + rng.choice([".", "!", "?", "..."]))
    parts.append(rng.choice(CLOSINGS))
    return " ".join(part for part in parts if part)


def make_split(rng: random.Random, size: int, held_out: bool) -> list[tuple[str, str]]:
    rows, seen = [], set()
    while len(rows) < size:
        label = LABELS[len(rows) % len(LABELS)]
        text = make_message(rng, label, held_out)
        if text not in seen:
            seen.add(text)
            rows.append((text, label))
    rng.shuffle(rows)
    return rows


def main(out_dir: Path = Path(__file__).parent / "support_tickets") -> None:
    rng = random.Random(20261130)
    train = make_split(rng, 1200, held_out=False)
    validation = make_split(rng, 400, held_out=True)
    write_splits(out_dir, {"train": train, "validation": validation})


def write_splits(out_dir: Path, splits: dict[str, list[tuple[str, str]]]) -> None:
    """Each split as out_dir/<name>.csv with a text and a label column (make_long_documents.py too)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        with open(out_dir / f"{name}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows(rows)
        print(f"wrote {len(rows)} rows to {out_dir / (name + '.csv')}")


if __name__ == "__main__":
    main()
