"""The `recipes-lib` command: parses the command line and hands each command to its module (tools/,
sweep/, tracking/dashboard.py); nothing else lives here."""
