"""The `recipes-lib` command: tools that work on finished runs (compare, show, predict, dashboard) and the planner."""
