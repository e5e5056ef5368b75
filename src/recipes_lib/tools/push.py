"""`recipes-lib push`: a finished run's output_dir to a model repository on the Hugging Face Hub.

    recipes-lib push outputs/demo/lora --repo_id my-name/minilm-tickets-lora [--private]

The model card (README.md) is written again first, with the repository's name in its loading code;
then the repository is made if it does not exist and the output_dir is uploaded, checkpoints left
out (tracking/hub.py). Without a token, in offline mode or without a network it stops with one line.
"""

from __future__ import annotations

import sys

from recipes_lib.errors import RecipeError
from recipes_lib.tracking.hub import push_run


def push(run_dir: str, repo_id: str, token: str | None = None, private: bool = False) -> int:
    """Upload the run, print what went where; a RecipeError (no token, offline, no network) is one line."""
    try:
        url, files = push_run(run_dir, repo_id, token=token, private=private or None)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    print(f"Pushed {len(files)} files to {url}:")
    for name in files:
        print(f"  {name}")
    return 0
