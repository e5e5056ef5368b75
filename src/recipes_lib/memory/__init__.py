"""Memory: what a run holds, measured phase by phase, and the planner that predicts it."""
