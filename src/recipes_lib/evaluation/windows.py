"""A document's windows (--long_text sliding_window) combined into one prediction, so metrics count documents
(docs/data-and-tasks.md): the mean of their logits (every window votes, a confident one more than an
unsure one) or their element-wise maximum (the strongest evidence anywhere in the document wins).
"""

from __future__ import annotations

import numpy as np

POOLINGS = ("mean", "max")


def combine_windows(logits: np.ndarray, document_ids, pooling: str = "mean") -> tuple[np.ndarray, np.ndarray]:
    """One row of logits per document, documents in the order of their first window; and the index
    of each document's first window (its label is the document's: `references[first_windows]`)."""
    logits = np.asarray(logits)
    document_ids = np.asarray(document_ids)
    if len(document_ids) != len(logits):
        raise ValueError(
            f"{len(logits)} predictions for {len(document_ids)} windows: every window of the split must be "
            "predicted once, in order, to be combined into its document's prediction."
        )
    if pooling not in POOLINGS:
        raise ValueError(f"window pooling '{pooling}'; use one of {', '.join(POOLINGS)}.")
    _, first_windows, document_of_window = np.unique(document_ids, return_index=True, return_inverse=True)
    # np.unique sorts the ids; the documents come out in the order their windows appear in.
    order = np.argsort(first_windows, kind="stable")
    document_of_window = np.argsort(order)[document_of_window.reshape(-1)]  # argsort of order: each id's rank
    shape = (len(order), *logits.shape[1:])
    if pooling == "max":
        combined = np.full(shape, -np.inf, dtype=np.float64)
        np.maximum.at(combined, document_of_window, logits)
    else:
        combined = np.zeros(shape, dtype=np.float64)
        np.add.at(combined, document_of_window, logits)
        counts = np.bincount(document_of_window, minlength=len(order))
        combined /= counts.reshape(-1, *([1] * (logits.ndim - 1)))
    return combined.astype(logits.dtype, copy=False), first_windows[order]
