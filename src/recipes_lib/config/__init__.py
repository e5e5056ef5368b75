"""Arguments: the typed dataclasses, YAML + command-line parsing, validation, precision, supported versions, the recipe registry."""
