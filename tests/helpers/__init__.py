"""What the tests share, by topic; test modules import these, never each other or conftest.py.

- `repo`: where the repository is, the registered recipes, a recipe script imported from its file.
- `data`: the learnable colour task and the files the runs train on (CSV, JSON lines, task files).
- `models`: the tiny randomly initialised encoders (a BERT, one of every supported family).
- `runs`: a recipe run's arguments (one builder) and the ways a test runs a recipe.
- `wandb_runs`: an isolated W&B environment and offline runs read back with `wandb leet inspect`.
- `scripts/`: programs the tests launch (not imported): record_results_writes.py.

tests/conftest.py builds its fixtures from these and sets the offline environment.
"""
