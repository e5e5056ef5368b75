"""Tracking: the W&B run of a recipe, its credentials, and the names it logs."""
