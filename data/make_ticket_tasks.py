"""Write two more demo datasets built from the support-ticket phrases of make_support_tickets.py.

    python data/make_ticket_tasks.py      # rewrites both datasets below

1. data/support_tickets_multilabel/{train,validation,test}.jsonl (multi-label classification)
   One JSON object per line: {"text": "...", "labels": ["billing", "shipping"]}. Each message
   carries 1 to 3 requests (about 45% one, 40% two, 15% three), each for a different team, joined
   by connectors such as "Also," or "On top of that,"; "labels" is the sorted list of those teams
   (billing, shipping, technical, account), so a model has to detect every team a message needs.
   Some messages open with a distracting clause naming a team that is *not* in the labels.

2. data/support_tickets_urgency/{train,validation,test}.csv (regression), columns text,urgency
   Single-request messages with a float urgency score in [0, 1], rounded to 2 decimals:

       urgency = round(clip(TEAM_BASE[team] + sum of cue amounts + gauss(0, 0.05), 0, 1), 2)

   TEAM_BASE: account 0.40 (lockouts, intrusions), technical 0.35, shipping 0.30, billing 0.25.
   Cue amounts (each cue appears at most once; its wording differs between the splits):
       repeat   +0.15  the message opens with a repeated-contact line ("Third message about this:")
       urgent   +0.25  a sentence saying it is urgent ("This is urgent.")
       asap     +0.15  the request ends with ", please fix it as soon as possible" or similar
       blocked  +0.20  a sentence about the impact ("My business is blocked.")
       deadline +0.15  a sentence with a deadline ("I need this sorted today.")
       calm     -0.20  a sentence saying there is no hurry ("No rush.", "Whenever you get a chance.")
   "calm" never appears together with the raising cues. The neutral openings and closings are the
   shared ones of make_support_tickets.py minus those that would read as urgency cues ("Third
   message about this:", "Sorry to bother you again,", "Not happy right now.", "This is urgent.",
   "Please help."), so the cues above are the only text that moves the score away from the team base.

Both tasks keep validation apart from training the same way the single-label script does:
validation messages use only the held-out requests (the last HELD_OUT_PER_CLASS of each team),
and the urgency cues in validation use phrasings training never shows. Products, openings,
closings and distracting clauses are shared. The output is deterministic (fixed seeds).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load_tickets():
    """Import make_support_tickets.py from this folder, wherever the script is run from."""
    spec = importlib.util.spec_from_file_location("make_support_tickets", HERE / "make_support_tickets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tickets = _load_tickets()
LABELS = tickets.LABELS
PUNCTUATION = [".", "!", "?", "..."]

# ---------------------------------------------------------------- multi-label

LABEL_COUNT_WEIGHTS = {1: 0.45, 2: 0.40, 3: 0.15}
CONNECTORS = [". Also,", ". On top of that,", ", and", ". Another thing:", ". And", ". Separately,"]


def pick_request(rng: random.Random, team: str, held_out: bool) -> str:
    held = tickets.HELD_OUT_PER_CLASS
    requests = tickets.REQUESTS[team][-held:] if held_out else tickets.REQUESTS[team][:-held]
    return rng.choice(requests).format(p=rng.choice(tickets.PRODUCTS))


def make_multilabel_message(rng: random.Random, teams: list[str], held_out: bool) -> str:
    parts = [rng.choice(tickets.OPENINGS)]
    others = [name for name in LABELS if name not in teams]
    if others and rng.random() < 0.35:
        parts.append(rng.choice(tickets.DISTRACTORS[rng.choice(others)]) + " but")
    order = list(teams)
    rng.shuffle(order)
    connectors = rng.sample(CONNECTORS, len(order) - 1)
    body = pick_request(rng, order[0], held_out)
    for connector, team in zip(connectors, order[1:], strict=True):
        body += f"{connector} {pick_request(rng, team, held_out)}"
    parts.append(body + rng.choice(PUNCTUATION))
    parts.append(rng.choice(tickets.CLOSINGS))
    return " ".join(part for part in parts if part)


def make_multilabel_split(
    rng: random.Random, size: int, held_out: bool, exclude: list[dict] = ()
) -> list[dict]:
    counts, weights = list(LABEL_COUNT_WEIGHTS), list(LABEL_COUNT_WEIGHTS.values())
    rows, seen = [], {row["text"] for row in exclude}
    while len(rows) < size:
        count = rng.choices(counts, weights)[0]
        teams = sorted(rng.sample(LABELS, count))
        text = make_multilabel_message(rng, teams, held_out)
        if text not in seen:
            seen.add(text)
            rows.append({"text": text, "labels": teams})
    rng.shuffle(rows)
    return rows


# ---------------------------------------------------------------- urgency

TEAM_BASE = {"account": 0.40, "technical": 0.35, "shipping": 0.30, "billing": 0.25}
NOISE_SD = 0.05
# cue -> (amount, probability, training phrasings, validation phrasings)
CUES = {
    "repeat": (
        0.15,
        0.25,
        ["Third message about this:", "I have asked twice already:", "Writing again about this:"],
        ["Fourth time writing about this:", "Still no answer, so once more:"],
    ),
    "urgent": (
        0.25,
        0.30,
        ["This is urgent.", "It is urgent.", "Urgent, please."],
        ["This is really urgent.", "Please treat this as urgent."],
    ),
    "asap": (
        0.15,
        0.30,
        [", please fix it as soon as possible", ", I need help right away", ", please sort it asap"],
        [", please deal with it immediately", ", please look at it without delay"],
    ),
    "blocked": (
        0.20,
        0.25,
        ["My business is blocked.", "I cannot work until this is fixed.", "Our team is stuck."],
        ["My whole shop is at a standstill.", "I am blocked and losing customers."],
    ),
    "deadline": (
        0.15,
        0.25,
        ["I need this sorted today.", "I have a deadline tomorrow.", "It has to be fixed by tonight."],
        ["I need it solved before my meeting this afternoon.", "The deadline is in two hours."],
    ),
    "calm": (
        -0.20,
        0.20,
        ["No rush.", "Whenever you get a chance.", "No hurry at all."],
        ["Take your time.", "It can wait until next week."],
    ),
}
RAISING = [name for name in CUES if name != "calm"]
URGENT_SOUNDING = {
    "Third message about this:",
    "Sorry to bother you again,",
    "Not happy right now.",
    "This is urgent.",
    "Please help.",
}
NEUTRAL_OPENINGS = [text for text in tickets.OPENINGS if text not in URGENT_SOUNDING]
NEUTRAL_CLOSINGS = [text for text in tickets.CLOSINGS if text not in URGENT_SOUNDING]


def urgency_score(team: str, cues: list[str], noise: float) -> float:
    raw = TEAM_BASE[team] + sum(CUES[name][0] for name in cues) + noise
    return round(min(1.0, max(0.0, raw)), 2)


def make_urgency_message(rng: random.Random, team: str, held_out: bool) -> tuple[str, float]:
    def phrase(name: str) -> str:
        return rng.choice(CUES[name][3] if held_out else CUES[name][2])

    if rng.random() < CUES["calm"][1]:
        cues = ["calm"]
    else:
        cues = [name for name in RAISING if rng.random() < CUES[name][1]]
    parts = [phrase("repeat") if "repeat" in cues else rng.choice(NEUTRAL_OPENINGS)]
    if rng.random() < 0.4:
        other = rng.choice([name for name in LABELS if name != team])
        parts.append(rng.choice(tickets.DISTRACTORS[other]) + " but")
    request = pick_request(rng, team, held_out)
    if "asap" in cues:
        request += phrase("asap")
    parts.append(request + rng.choice(PUNCTUATION))
    sentences = [phrase(name) for name in ("urgent", "blocked", "deadline", "calm") if name in cues]
    rng.shuffle(sentences)
    parts.extend(sentences)
    parts.append(rng.choice(NEUTRAL_CLOSINGS))
    text = " ".join(part for part in parts if part)
    return text, urgency_score(team, cues, rng.gauss(0.0, NOISE_SD))


def make_urgency_split(
    rng: random.Random, size: int, held_out: bool, exclude: list[tuple[str, float]] = ()
) -> list[tuple[str, float]]:
    rows, seen = [], {text for text, _ in exclude}
    while len(rows) < size:
        team = LABELS[len(rows) % len(LABELS)]
        text, score = make_urgency_message(rng, team, held_out)
        if text not in seen:
            seen.add(text)
            rows.append((text, score))
    rng.shuffle(rows)
    return rows


# ---------------------------------------------------------------- writing


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows to {path}")


def write_csv(path: Path, header: list[str], rows: list[tuple]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {path}")


def main(out_root: Path = HERE) -> None:
    rng = random.Random(20261201)
    multilabel = out_root / "support_tickets_multilabel"
    multilabel.mkdir(parents=True, exist_ok=True)
    write_jsonl(multilabel / "train.jsonl", make_multilabel_split(rng, 1200, held_out=False))
    validation = make_multilabel_split(rng, 300, held_out=True)
    write_jsonl(multilabel / "validation.jsonl", validation)
    # A test split like validation (held-out requests, no text of validation's): what the thresholds
    # tuned on validation score on rows they were not tuned on.
    write_jsonl(multilabel / "test.jsonl", make_multilabel_split(rng, 300, held_out=True, exclude=validation))

    rng = random.Random(20261202)
    urgency = out_root / "support_tickets_urgency"
    urgency.mkdir(parents=True, exist_ok=True)
    write_csv(urgency / "train.csv", ["text", "urgency"], make_urgency_split(rng, 1200, held_out=False))
    validation = make_urgency_split(rng, 300, held_out=True)
    write_csv(urgency / "validation.csv", ["text", "urgency"], validation)
    write_csv(
        urgency / "test.csv",
        ["text", "urgency"],
        make_urgency_split(rng, 300, held_out=True, exclude=validation),
    )


if __name__ == "__main__":
    main()
