"""Logits of an exported model through ONNX Runtime, batched and padded by the run's collator as predict
batches the PyTorch model, fed as int64 arrays under the graph's own input names."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from recipes_lib.whole_files import DamagedFileError


def _onnx_load_failures() -> tuple[type[Exception], ...]:
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    names = ("Fail", "InvalidProtobuf", "InvalidGraph", "InvalidArgument", "NoSuchFile", "RuntimeException")
    return tuple(getattr(state, name) for name in names if hasattr(state, name))


def onnx_session(onnx_path: str | Path, threads: int | None = None):
    """An ONNX Runtime CPU session; `threads`: intra-op threads (default: ONNX Runtime's, one per core)."""
    import onnxruntime

    load_failures = _onnx_load_failures()
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.log_severity_level = 3  # errors only: not the notes on unused initializers
    try:
        return onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    except load_failures as error:  # a damaged file: one paragraph naming it
        raise damaged_onnx(onnx_path, error) from None


def session_logits(session, batch: dict) -> np.ndarray:
    """One batch (tensors or arrays by input name) through `session`: its logits as float32."""
    names = [node.name for node in session.get_inputs()]
    feed = {name: np.asarray(batch[name], dtype=np.int64) for name in names}
    return np.asarray(session.run(None, feed)[0], dtype=np.float32)


def onnx_logits(session, encoded, collator, batch_size: int, progress: bool = True) -> np.ndarray:
    """The exported model's logits for tokenized rows, in input order (evaluation.inference.batch_logits' twin)."""
    from tqdm.auto import tqdm

    model_inputs = collator.tokenizer.model_input_names
    encoded = encoded.remove_columns([c for c in encoded.column_names if c not in model_inputs])
    logits = []
    for start in tqdm(range(0, len(encoded), batch_size), desc="Predicting (ONNX)", unit="batch",
                      disable=not progress):  # fmt: skip
        rows = encoded.select(range(start, min(start + batch_size, len(encoded))))
        batch = collator([rows[i] for i in range(len(rows))])
        logits.append(session_logits(session, {name: batch[name].numpy() for name in model_inputs}))
    return np.concatenate(logits)


def measure_latency(engines: dict, inputs: list[dict], warmup: int = 3) -> dict:
    """{"rows", "median_ms": {name: ms}}: each of `engines` (callables taking one of `inputs`, a batch of 1)
    timed row by row, every engine in turn in a rotating order, so a burst of load falls on all alike."""
    import statistics
    import time

    names = list(engines)
    for row in inputs[:warmup]:
        for name in names:
            engines[name](row)
    timings: dict[str, list[float]] = {name: [] for name in names}
    for index, row in enumerate(inputs):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            started = time.perf_counter()
            engines[name](row)
            timings[name].append(1000 * (time.perf_counter() - started))
    return {
        "rows": len(inputs),
        "median_ms": {name: round(statistics.median(times), 3) for name, times in timings.items()},
    }


def damaged_onnx(path: str | Path, error: Exception) -> DamagedFileError:
    """ONNX Runtime's refusal of a model file, as the paragraph a damaged file gets."""
    path = Path(path)
    size = path.stat().st_size if path.is_file() else 0
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return DamagedFileError(
        f"{path} (an ONNX model, {size:,} bytes) cannot be loaded: ONNX Runtime says {first!r}"
        f"{' (the file is empty)' if size == 0 else ''}. It was cut short while being written or copied, or changed "
        "since. Export the run again (recipes-lib export OUTPUT_DIR), or restore the file from a copy."
    )
