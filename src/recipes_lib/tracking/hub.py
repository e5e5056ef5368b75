"""A finished run on the Hugging Face Hub: `recipes-lib push`, and the check `--push_to_hub` makes first.

Both refuse to start without a token or with the Hub switched off (HF_HUB_OFFLINE), saying so in one
line: the Trainer would otherwise fail deep inside `create_repo` after the model has loaded, or at
the end of training. The files pushed are those of the output_dir but the checkpoints and the
Trainer's `_*` scratch files, as the Trainer's own push leaves out.
"""

from __future__ import annotations

from pathlib import Path

from recipes_lib.errors import ConfigError, HubError
from recipes_lib.results import RESULTS_FILE, read_results
from recipes_lib.tracking.model_card import write_card

# What `Trainer.push_to_hub` ignores (its scratch files, the checkpoints), and the local W&B files.
PUSH_IGNORE_PATTERNS = ["_*", "checkpoint-*", "wandb/*", "*.lock"]
NO_TOKEN = "no Hugging Face token found (set HF_TOKEN, run `hf auth login`, or pass --token)"


def hub_problem(token: str | None = None) -> str | None:
    """Why a push cannot even start from here (offline mode, no token); None when it can be tried."""
    from huggingface_hub import constants, get_token

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set, so the Hub is switched off in this environment (unset it to push)"
    if not (token or get_token()):
        return NO_TOKEN
    return None


def check_push_to_hub(training) -> None:
    """--push_to_hub: refuse before any download when the push could not work (Trainer's own push)."""
    if not training.push_to_hub:
        return
    problem = hub_problem(training.hub_token)
    if problem is not None:
        raise HubError(
            f"--push_to_hub asks to upload the model to the Hub, but {problem}. Nothing was trained; fix that, "
            "or leave --push_to_hub out and push the finished run later with `recipes-lib push OUTPUT_DIR "
            "--repo_id NAME`."
        )


def files_to_push(output_dir: str | Path) -> list[str]:
    """The output_dir's files, relative and sorted, that a push uploads (huggingface_hub's own filter)."""
    from huggingface_hub.utils import filter_repo_objects

    root = Path(output_dir)
    paths = sorted(path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())
    return list(filter_repo_objects(paths, ignore_patterns=PUSH_IGNORE_PATTERNS))


def push_run(
    output_dir: str | Path, repo_id: str, token: str | None = None, private: bool | None = None
) -> tuple[str, list[str]]:
    """Upload a finished run (model, card, results) to the model repository `repo_id`, made if missing.

    The card is written again first, naming `repo_id` in its loading code. Returns the repository's
    URL and the files uploaded.
    """
    from huggingface_hub import HfApi

    output_dir = Path(output_dir)
    if not (output_dir / RESULTS_FILE).is_file():
        raise ConfigError(
            f"'{output_dir}' holds no {RESULTS_FILE}, so it is not a finished run; pass the output_dir of a run "
            "that finished (it writes results.json last)."
        )
    problem = hub_problem(token)
    if problem is not None:
        raise HubError(f"Cannot push '{output_dir}' to the Hub: {problem}. Nothing was uploaded.")
    write_card(output_dir, read_results(output_dir), repo_id)
    files = files_to_push(output_dir)
    api = HfApi(token=token)
    try:
        repo = api.create_repo(repo_id, private=private, exist_ok=True)
        api.upload_folder(
            repo_id=repo.repo_id,
            folder_path=output_dir,
            commit_message="Upload a recipes-lib run: model, card and results",
            ignore_patterns=PUSH_IGNORE_PATTERNS,
        )
    except Exception as error:  # noqa: BLE001 - network, HTTP and auth errors all end the same way
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise HubError(
            f"Could not push '{output_dir}' to the Hub repository '{repo_id}': {detail}. Check the network, the "
            "token's write access and the repository name."
        ) from None
    return repo.url, files
