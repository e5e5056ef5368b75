"""`recipes-lib sweep`: a fair comparison of recipes, each at its own learning rate, over seeds.

    config.py          the sweep file (and flags): checked, and each trial's command
    preflight.py       before any trial: the recipes' arguments and memory, checked in a child process
                       (check_recipes.py: parsing reads the device, which must not happen in the sweep)
    trials.py          one trial: its `accelerate launch`, its outcome
    study.py           the Optuna study in OUTPUT_DIR/sweep.db: samplers, heartbeat, what the trials recorded
    runner.py          the sweep: the plan, the search then the seeds, resuming, the report
    report.py          the figures, Welch's t-test, the table, sweep_results.json and the chart

Optuna is the optional extra `sweep` (pip install 'recipes-lib[sweep]'): study.py and runner.py import
it; config.py and preflight.py do not.
"""
