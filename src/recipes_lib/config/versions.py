"""The library versions this package supports, checked once when it is imported.

training/trainer.py overrides private Trainer methods (`_run_epoch`, `_save_checkpoint`,
`_get_train_sampler`) that transformers may change in any release, and the recipes use
TrainingArguments fields that older 5.x releases lack. Outside the range setup.cfg declares,
importing a recipe would fail deep inside transformers, or worse, train differently. The range is
read from this package's installed metadata, so setup.cfg stays its one source.
"""

from __future__ import annotations

from importlib import metadata

from packaging.requirements import Requirement

DISTRIBUTION = "recipes-lib"
CHECKED = ("transformers",)


class UnsupportedVersion(ImportError):
    """A checked library's installed version is outside the range setup.cfg declares."""


def supported_range(package: str) -> str | None:
    """The version specifier setup.cfg gives `package` (e.g. '<6,>=5.23'); None when not installed as a package."""
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return None
    for line in requirements:
        requirement = Requirement(line)
        if requirement.name == package and requirement.marker is None:
            return str(requirement.specifier)
    return None


def check_supported_versions() -> None:
    for package in CHECKED:
        specifier = supported_range(package)
        if not specifier:
            continue
        installed = metadata.version(package)
        if not Requirement(f"{package}{specifier}").specifier.contains(installed, prereleases=True):
            raise UnsupportedVersion(
                f"recipes-lib supports {package}{specifier}, but {package} {installed} is installed: "
                f'run pip install "{package}{specifier}".'
            )
