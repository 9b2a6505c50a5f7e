"""The `rulec` command's shells: argument parsing, reading inputs from disk, printing results
(text, JSON, SARIF, JUnit XML) and exit codes, over the compiler library (`rulec`).

The library never imports this package (tests/unit/test_layers.py keeps it so)."""
