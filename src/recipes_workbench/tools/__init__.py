"""Tools on finished runs, one module per command: compare (and compare --wandb), show, predict, push;
and plan, the memory planner's command. Each is imported only when its command runs (cli/main.py)."""
