"""The transformers releases the recipes support: setup.cfg's range (tests/test_versions.py holds them equal),
checked where a run (config/parsing.py) or a `recipes-lib` command that loads transformers (cli/main.py) starts.
Outside it a recipe would fail deep inside transformers, or train differently."""

from transformers.utils.versions import require_version

TRANSFORMERS = "transformers>=5.6,<6"


def check_supported_versions() -> None:
    require_version(TRANSFORMERS, f'recipes-lib supports {TRANSFORMERS}: run pip install "{TRANSFORMERS}".')
