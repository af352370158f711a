"""code-runner: run bounded code work in a disposable workspace and prove what happened."""

__version__ = "0.1.0"
