"""A run's model files checked before they are loaded (issue 54): a damaged weights file, adapter config or
ONNX model is named in one paragraph with what to do, never a traceback from safetensors, json or ONNX
Runtime. Each check reads only what a load reads first (a JSON file, a safetensors header and its length),
so it costs no second read of the weights."""

from __future__ import annotations

from pathlib import Path

from safetensors import SafetensorError, safe_open

from recipes_lib.whole_files import DamagedFileError, read_json

RESTORE = "Restore the run's directory from a copy, or train it again (the same command with --overwrite_output_dir)."
JSON_FILES = {
    "config.json": "the model's configuration",
    "adapter_config.json": "the LoRA adapter's configuration",
}


def check_model_files(directory: str | Path) -> None:
    """The model files a load of `directory` reads: its JSON configurations parse to objects, and every
    .safetensors file has a whole header and exactly the bytes the header says."""
    directory = Path(directory)
    for name, what in JSON_FILES.items():
        path = directory / name
        if path.is_file() and not isinstance(read_json(path, what, RESTORE), dict):
            raise DamagedFileError(
                f"{path} ({what}) is not a JSON object: it was changed since it was written. {RESTORE}"
            )
    for path in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except (SafetensorError, OSError) as error:
            size = path.stat().st_size
            raise DamagedFileError(
                f"{path} (the run's weights, {size:,} bytes) is damaged: safetensors reads {str(error).strip()!r}"
                f"{' (the file is empty)' if size == 0 else ''}. It was cut short while being written or copied, "
                f"or changed since. {RESTORE}"
            ) from None
