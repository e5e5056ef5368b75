"""The library versions this package supports, checked where a run (config/parsing.py) or a
`recipes-lib` command (cli/main.py) starts: outside the range setup.cfg declares (read from the
installed metadata), a recipe would fail deep inside transformers, or train differently. The private
Trainer methods training/trainer.py overrides are checked too (PrivateHook), whatever the version says.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
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


# --- Private Trainer methods the library still overrides -------------------------------------------
#
# Where transformers offers a public extension point (callbacks, compute_loss_func, the dataloader
# getters), training/ uses it. Where it does not, training/trainer.py overrides a private method, and
# names it in a PrivateHook: checked when trainer.py is imported, so a release that renames it or
# changes its parameters stops the recipes at once with the fix, instead of training differently
# (an override that is no longer called is silently skipped). tests/test_trainer_surface.py checks
# the same list against the installed transformers.


@dataclass(frozen=True)
class PrivateHook:
    """A private method of a transformers class that the library overrides or calls."""

    name: str
    parameters: tuple[str, ...]  # after self, in order: an override must accept exactly these
    feature: str  # what the recipes lose without it, for the error message


def hook_problem(cls: type, hook: PrivateHook) -> str | None:
    """What is wrong with `hook` on `cls` in the installed release, or None when it is as expected."""
    method = getattr(cls, hook.name, None)
    if not callable(method):
        return f"has no {cls.__name__}.{hook.name}"
    found = tuple(inspect.signature(method).parameters)[1:]  # without self
    if found != hook.parameters:
        return f"defines {cls.__name__}.{hook.name}({', '.join(found)})"
    return None


def check_private_hooks(cls: type, hooks: tuple[PrivateHook, ...]) -> None:
    """Raise UnsupportedVersion, one paragraph naming the release and the fix, for the first broken hook."""
    for hook in hooks:
        problem = hook_problem(cls, hook)
        if problem is not None:
            expected = f"{cls.__name__}.{hook.name}(self, {', '.join(hook.parameters)})"
            raise _private_surface_changed(f"private {expected}", hook.feature, problem)


def check_private_attribute(instance: object, name: str, feature: str, owner: str = "Trainer") -> None:
    """Like check_private_hooks, for an attribute the constructor of a transformers class (owner) sets."""
    if not hasattr(instance, name):
        raise _private_surface_changed(f"private attribute {owner}.{name}", feature, "no longer sets it")


def _private_surface_changed(what: str, feature: str, problem: str) -> UnsupportedVersion:
    installed = metadata.version("transformers")
    specifier = supported_range("transformers") or ""
    return UnsupportedVersion(
        f"recipes-lib relies on transformers' {what} for {feature}, but transformers {installed} {problem}. "
        f'Install a release the recipes are tested with: pip install "transformers{specifier}". If {installed} '
        "is inside that range, the range is wrong: please report it (tests/test_trainer_surface.py names "
        "every private method the library depends on)."
    )
