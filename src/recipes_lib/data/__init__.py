"""Data: local files and Hub datasets, label mapping and task detection, tokenization, collation."""
