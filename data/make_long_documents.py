"""Write the long-document demo task: support-ticket threads whose team is decided near their end.

    python data/make_long_documents.py      # rewrites data/long_documents/{train,validation}.csv
    python data/make_long_documents.py --sentences 240 275 --train 120 --validation 60 --out_dir DIR
                                            # longer threads (about 3,500 to 4,000 tokens), written to DIR

The project wrote every phrase below (the requests and products are those of make_support_tickets.py).
Each document is a customer's long message of about 300 to 500 tokens (all-MiniLM-L6-v2's WordPiece;
`--sentences` makes the history longer, drawn with repeats once it outgrows the phrases below):
a greeting, then twenty-odd sentences of history and small talk, then one passage that says what the
customer needs today, then a short sign-off. Only that late passage decides the label (billing,
shipping, technical, account); the history is drawn independently of it and mentions every team's
topics as things already settled ("the refund for my first order came through"), so the opening of a
document says nothing about its label, and a model that reads only the first 128 tokens is at chance.
As in the ticket demo, validation requests use phrasings training never shows. Deterministic (fixed seed).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from make_support_tickets import HELD_OUT_PER_CLASS, LABELS, PRODUCTS, REQUESTS, write_splits  # noqa: E402

GREETINGS = [
    "Hello support team,",
    "Hi there,",
    "Dear customer service,",
    "Good afternoon,",
    "Hello again,",
    "Hi, I hope this reaches the right person.",
]
# Settled matters, one list per team: every document mentions several teams' topics before its request.
HISTORY = {
    "billing": [
        "Back in spring I was charged twice once, and a colleague of yours refunded it the same day.",
        "The invoice for my first order had a small mistake, but it was corrected quickly.",
        "I changed the card on my account last year without any trouble.",
        "The price match you offered on an earlier order was honoured in full.",
        "The refund for a return I made in the summer came through within a week.",
    ],
    "shipping": [
        "My first parcel came two days late, but it arrived in good shape.",
        "The courier once left a box with my neighbour, which was fine by me.",
        "Tracking worked well for every order I placed before.",
        "Delivery to the pickup point near my office has always been quick.",
        "A package of mine was held at customs once, and it was released after a day.",
    ],
    "technical": [
        "The firmware update last month went through without a problem.",
        "When the app crashed in the summer, reinstalling it fixed everything.",
        "The bluetooth pairing took a few tries the first time and has worked since.",
        "Your guide on resetting {p} helped me once before.",
        "The display settings confused me at first, but the manual explained them.",
    ],
    "account": [
        "I reset my password a while ago and the email came straight away.",
        "I turned on two-factor authentication when I signed up, and it works.",
        "My profile and address details are all up to date.",
        "Logging in from my new laptop worked the first time.",
        "I merged my old account into this one last year with your help.",
    ],
}
SMALL_TALK = [
    "I use {p} almost every day.",
    "We bought {p} as a gift for my sister, and she liked it a lot.",
    "The colour matches the rest of the room nicely.",
    "I have recommended your shop to a few friends and colleagues.",
    "My order number is {n}, in case you need it.",
    "I am writing from my phone, so sorry for any typos.",
    "The instructions in the box were clear and short.",
    "I read the help pages before writing to you.",
    "It is a busy week at work, so email suits me best.",
    "The packaging was mostly recyclable, which I appreciate.",
    "I compared a few shops before choosing yours.",
    "The product page described {p} well.",
    "We have two children at home, so things get a lot of use here.",
    "I live on the third floor of a building without a lift.",
    "I usually place my orders at the weekend.",
    "My partner also ordered {p} from you a few months ago.",
    "Overall the quality has been better than I expected.",
    "I have been a customer for about four years now.",
    "Your newsletter had a nice article about looking after {p}.",
    "I kept the original box, just in case.",
]
# What introduces the request: the one passage that decides the label.
TODAY = [
    "Anyway, the reason I am writing today is this:",
    "So, to my actual problem this time:",
    "Here is the issue I need help with now:",
    "What I need from you today is simple:",
    "Now to the point of this message:",
]
AFTER = [
    "Could you please sort this out?",
    "I would be grateful for a quick answer.",
    "Please tell me what you need from me to fix it.",
    "I hope this can be solved soon.",
]
SIGN_OFFS = ["", "Thanks.", "Best regards.", "Kind regards, and thank you.", "Cheers."]
# Sentences of history and small talk before the request: about 300 to 500 tokens in all.
BODY_SENTENCES = (24, 33)


def make_document(
    rng: random.Random, label: str, held_out: bool, sentences: tuple[int, int] = BODY_SENTENCES
) -> str:
    requests = REQUESTS[label][-HELD_OUT_PER_CLASS:] if held_out else REQUESTS[label][:-HELD_OUT_PER_CLASS]
    product = rng.choice(PRODUCTS)
    history = [sentence for team in LABELS for sentence in HISTORY[team]]
    body = rng.sample(history, rng.randint(8, 12)) + rng.sample(SMALL_TALK, rng.randint(15, 20))
    rng.shuffle(body)
    body = body[: rng.randint(*sentences)]
    if sentences != BODY_SENTENCES:  # a longer history: the phrases again, in another order
        body += rng.choices(history + SMALL_TALK, k=max(0, rng.randint(*sentences) - len(body)))
    order_number = f"{rng.randint(100000, 999999)}"
    request = rng.choice(requests).format(p=product)
    parts = [
        rng.choice(GREETINGS),
        *(sentence.format(p=rng.choice(PRODUCTS), n=order_number) for sentence in body),
        f"{rng.choice(TODAY)} {request}.",
        rng.choice(AFTER),
        rng.choice(SIGN_OFFS),
    ]
    return " ".join(part for part in parts if part)


def make_split(
    rng: random.Random, size: int, held_out: bool, sentences: tuple[int, int] = BODY_SENTENCES
) -> list[tuple[str, str]]:
    rows = [
        (make_document(rng, LABELS[i % len(LABELS)], held_out, sentences), LABELS[i % len(LABELS)])
        for i in range(size)
    ]
    rng.shuffle(rows)
    return rows


def main(
    out_dir: Path = Path(__file__).parent / "long_documents",
    sentences: tuple[int, int] = BODY_SENTENCES,
    train: int = 1000,
    validation: int = 300,
) -> None:
    rng = random.Random(20261202)
    train_rows = make_split(rng, train, held_out=False, sentences=sentences)
    validation_rows = make_split(rng, validation, held_out=True, sentences=sentences)
    write_splits(out_dir, {"train": train_rows, "validation": validation_rows})


def command_line(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out_dir", type=Path, default=Path(__file__).parent / "long_documents")
    parser.add_argument("--sentences", type=int, nargs=2, default=BODY_SENTENCES, metavar=("MIN", "MAX"),
                        help="sentences of history before the request (default 24 33: 300-500 tokens)")  # fmt: skip
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--validation", type=int, default=300)
    args = parser.parse_args(argv)
    main(args.out_dir, tuple(args.sentences), args.train, args.validation)


if __name__ == "__main__":
    command_line()
