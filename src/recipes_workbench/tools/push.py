"""`recipes-lib push`: a finished run's output_dir to a model repository on the Hugging Face Hub, its card
written again first with the repository's name (docs/sharing.md, "Pushing a finished run")."""

from __future__ import annotations

from pathlib import Path

from recipes_lib.errors import ConfigError, HubError, RecipeError
from recipes_lib.locking import lock_directory
from recipes_lib.results import RESULTS_FILE, read_results
from recipes_lib.tracking.hub import hub_problem
from recipes_lib.tracking.model_card import CARD_FILE, write_card
from recipes_lib.whole_files import written_whole
from recipes_workbench.recipes import recipe_summary
from recipes_workbench.shared import print_error

# What `Trainer.push_to_hub` ignores (its scratch files, the checkpoints), the local W&B files, an export
# whose gate failed, and every hidden name at any depth: the lock, a killed writer's `.NAME.XXXXXXXX.tmp`,
# export's `.export-*` staging (fnmatch's * crosses /, so ".*" covers a hidden top-level directory's files).
PUSH_IGNORE_PATTERNS = ["_*", "checkpoint-*", "wandb/*", "*.lock", ".*", "*/.*", "export.failed/*"]


def push(run_dir: str, repo_id: str, token: str | None = None, private: bool = False) -> int:
    """Upload the run, print what went where; a RecipeError (no token, offline, no network) is one line."""
    try:
        url, files = push_run(run_dir, repo_id, token=token, private=private or None)
    except RecipeError as error:
        print_error(error)
        return error.exit_code
    print(f"Pushed {len(files)} files to {url}:")
    for name in files:
        print(f"  {name}")
    return 0


def files_to_push(output_dir: str | Path) -> list[str]:
    """The output_dir's files, relative and sorted, that a push uploads (huggingface_hub's own filter)."""
    from huggingface_hub.utils import filter_repo_objects

    root = Path(output_dir)
    paths = sorted(path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())
    return list(filter_repo_objects(paths, ignore_patterns=PUSH_IGNORE_PATTERNS))


def push_run(
    output_dir: str | Path, repo_id: str, token: str | None = None, private: bool | None = None
) -> tuple[str, list[str]]:
    """Upload a finished run (model, card, results) to the model repository `repo_id`, made if missing, its
    card written again first naming `repo_id`; returns the repository's URL and the files uploaded."""
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
    # Held for the whole push: a run or export still writing there is refused; nothing half-written goes.
    with lock_directory(output_dir, "push", stale_advice=STALE_ADVICE):
        card = output_dir / CARD_FILE
        previous_card = card.read_bytes() if card.is_file() else None
        results = read_results(output_dir)
        write_card(output_dir, results, repo_id, recipe_summary(results.recipe))
        try:
            return upload(HfApi(token=token), output_dir, repo_id, private)
        except BaseException:  # the card names a repository that did not get the run: the old one back, whole
            if previous_card is None:
                card.unlink(missing_ok=True)
            else:
                with written_whole(card, "wb") as file:
                    file.write(previous_card)
            raise


STALE_ADVICE = "Resume or rerun the command that was writing there first, so the run is whole. "


def upload(api, output_dir: Path, repo_id: str, private: bool | None) -> tuple[str, list[str]]:
    """The repository made if missing and the run's files uploaded; the URL and those files."""
    files = files_to_push(output_dir)
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
            "token's write access and the repository name. The run's files are as they were."
        ) from None
    return repo.url, files
