"""The project lines a short CPU run of a recipe has loaded by its end, counted from sys.modules.

    python tools/run_loaded_lines.py full_ft /tmp/loaded-full_ft [-v] [recipe options...]
    python tools/run_loaded_lines.py distill /tmp/loaded-distill --teacher outputs/demo/full_ft

Runs the recipe's main() in this process on the demo config (recipes/configs/demo.yaml) for 2 steps,
without the evaluation between epochs, then counts the lines (as tests/test_packages.py counts them) of
every recipes_lib and recipes_workbench module loaded, imports inside functions included: what a run
carries, where tests/test_recipe_imports.py counts only what a recipe imports at start-up. -v lists the
modules, largest first; other arguments go to the recipe. Run offline (HF_HUB_OFFLINE=1 WANDB_MODE=offline) as `make demo` does.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("recipes_lib", "recipes_workbench")


def main(recipe: str, output_dir: str, recipe_options: list[str], verbose: bool) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    spec = importlib.util.spec_from_file_location(f"_recipe_{recipe}", ROOT / "recipes" / f"{recipe}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    os.chdir(ROOT)
    script.main(
        ["--config", "recipes/configs/demo.yaml", "--output_dir", output_dir, "--max_steps", "2"]
        + ["--max_eval_samples", "16", "--eval_strategy", "no", "--use_cpu", "true", *recipe_options]
    )
    loaded = {
        name: module.__file__
        for name, module in list(sys.modules.items())
        if name.split(".")[0] in PACKAGES and getattr(module, "__file__", None)
    }
    lines = {name: len(Path(path).read_text().splitlines()) for name, path in loaded.items()}
    print(f"LOADED {len(lines)} modules, {sum(lines.values())} lines")
    if verbose:
        for name, count in sorted(lines.items(), key=lambda item: -item[1]):
            print(count, name)


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "-v"]
    if len(arguments) < 2:
        sys.exit(__doc__)
    main(arguments[0], arguments[1], arguments[2:], verbose="-v" in sys.argv)
