"""Whether W&B would find an API key, checked locally: no prompt, no network, no training stack. Asked by
wandb_run.py before a run starts and by recipes_workbench/dashboard.py before saving a view; apart from
wandb_run.py so that `recipes-lib wandb-dashboard` does not import the Trainer.
"""

from __future__ import annotations

import os


def has_credentials(settings) -> bool:
    """Whether wandb.init would find credentials (env, ~/.netrc, settings file) without prompting."""
    try:
        from wandb.sdk.lib import wbauth
    except ImportError:  # another wandb layout: check the two usual places ourselves
        import netrc
        from urllib.parse import urlsplit

        if os.environ.get("WANDB_API_KEY"):
            return True
        try:
            return netrc.netrc().authenticators(urlsplit(settings.base_url).netloc) is not None
        except (OSError, netrc.NetrcParseError):
            return False
    from wandb.errors import AuthenticationError

    host = wbauth.HostUrl(settings.base_url, app_url=settings.app_url)
    try:
        found = wbauth.authenticate_session(
            host=host, source="recipes_lib", prompt=False, update_session=False
        )
    except AuthenticationError:  # a malformed key: wandb.init would raise on it
        return False
    return found is not None


NO_KEY_REASON = "no W&B API key found (set WANDB_API_KEY or run `wandb login`)"
