"""Evaluation: metrics through `evaluate` (shipped modules), predictions and per-class reports."""
