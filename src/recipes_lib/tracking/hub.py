"""Whether a push to the Hugging Face Hub can start (a token, the Hub not switched off by HF_HUB_OFFLINE):
the check `--push_to_hub` makes first, and `recipes-lib push` too (tools/push.py). Without it the Trainer
would fail deep inside `create_repo` after the model has loaded, or at the end of training.
"""

from __future__ import annotations

from recipes_lib.errors import HubError

NO_TOKEN = "no Hugging Face token found (set HF_TOKEN or run `hf auth login`)"


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
    problem = hub_problem(training.hub_token)
    if problem is not None:
        raise HubError(
            f"--push_to_hub asks to upload the model to the Hub, but {problem}. Nothing was trained; fix that, "
            "or leave --push_to_hub out and push the finished run later with `recipes-lib push OUTPUT_DIR "
            "--repo_id NAME`."
        )
