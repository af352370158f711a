"""The commands: one module per command family, parsing and rendering only; the logic lives
in the packages below. `main.cli` is the entry point and `boundary` the one error boundary."""
