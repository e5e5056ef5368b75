"""Importing recipes_lib, or any of its modules, changes nothing outside the package.

No import hook in sys.meta_path, no logging filter, handler or level, no other package's entry in
sys.modules set to None or removed, no environment variable: what a module does to the process, it
does in a block that undoes it (config/bitsandbytes_import.py) or where a run or command starts
(config/versions.py's check). Checked in a fresh interpreter, where each change is charged to the
module whose body made it (the innermost `<module>` frame), so that what torch or transformers do
at their own import (they add logging handlers, torch sets TORCHINDUCTOR_CACHE_DIR) is theirs.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.repo import REPO_ROOT

AUDIT = r"""
import importlib, importlib.util, json, logging, os, pkgutil, sys

SOURCE = os.path.dirname(importlib.util.find_spec("recipes_lib").origin)  # found, not imported
changes = []  # (what, the module that did it)


def importing_module():
    # The file of the module whose body is running: what the change is charged to.
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else None


def audited(method, describe):
    def wrapper(*args, **kwargs):
        module = importing_module()
        if module and module.startswith(SOURCE):
            changes.append((describe(*args), module, args))
        return method(*args, **kwargs)
    return wrapper


for name in ("addFilter", "addHandler", "setLevel"):
    setattr(logging.Logger, name, audited(getattr(logging.Logger, name), lambda logger, *_, n=name: f"{n} on logger {logger.name!r}"))
environ = type(os.environ)
environ.__setitem__ = audited(environ.__setitem__, lambda _, key, *__: f"os.environ[{key!r}] set")
environ.__delitem__ = audited(environ.__delitem__, lambda _, key: f"os.environ[{key!r}] deleted")


class MetaPath(list):
    insert = audited(list.insert, lambda _, i, finder: f"{type(finder).__name__} inserted in sys.meta_path")
    append = audited(list.append, lambda _, finder: f"{type(finder).__name__} appended to sys.meta_path")


sys.meta_path = MetaPath(sys.meta_path)
environment = dict(os.environ)
blocked = {name for name, module in sys.modules.items() if module is None}
present = set(sys.modules) - blocked


def left_behind():
    # The audited changes still in force, and other packages' modules set to None or removed.
    found = []
    for what, module, args in changes:
        target, value = args[0], args[-1]
        if what.startswith(("addFilter", "addHandler")):
            still = value in target.filters or value in target.handlers
        elif what.startswith("setLevel"):
            still = True
        elif what.startswith("os.environ"):
            still = os.environ.get(args[1]) != environment.get(args[1])
        else:
            still = value in sys.meta_path
        if still:
            found.append(f"{what} by {os.path.relpath(module, SOURCE)}")
    found += [
        f"sys.modules[{name!r}] set to None or removed"
        for name in (present | set(sys.modules)) - blocked
        if sys.modules.get(name) is None and not name.startswith("recipes_lib")
    ]
    return sorted(set(found))


before = set(sys.modules)
import recipes_lib
package = {"loaded": sorted(set(sys.modules) - before), "left behind": left_behind()}
for name in sys.argv[1:]:  # each recipe's closure, in the order the recipe imports it
    spec = importlib.util.spec_from_file_location(f"_recipe_{name}", f"recipes/{name}.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
recipes = left_behind()
failed = []
for module in pkgutil.walk_packages(recipes_lib.__path__, "recipes_lib."):  # and every other module
    try:
        importlib.import_module(module.name)
    except ImportError as error:  # an optional extra that is not installed here
        failed.append(f"{module.name}: {error}")
print(json.dumps({"package": package, "recipes": recipes, "every module": left_behind(), "not importable": failed}))
"""


def test_importing_the_package_and_every_module_changes_nothing_outside_it():
    from recipes_workbench.recipes import RECIPES

    completed = subprocess.run(
        [sys.executable, "-c", AUDIT, *RECIPES], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = json.loads(completed.stdout.splitlines()[-1])
    assert found["package"] == {
        "loaded": ["recipes_lib"],
        "left behind": [],
    }  # the package alone: nothing else
    assert found["recipes"] == []
    assert found["every module"] == []
    assert found["not importable"] == []
