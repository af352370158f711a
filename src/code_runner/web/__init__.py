"""`code-runner serve`: a local web dashboard over run records, live, in a browser.

`app.create_app` builds the Starlette app over the configured roots behind a
`security.Guard` (loopback by default; a token off loopback; CSRF on every POST). Pages read
task records through `record` and exec records through `monitor`; the buttons run the same
commands as the CLI (`actions`). Needs the `web` extra: `pip install code-runner[web]`.
"""

from code_runner.web.app import create_app
from code_runner.web.roots import OutsideRoots, Roots, RunKey
from code_runner.web.security import Guard, is_loopback

__all__ = ["Guard", "OutsideRoots", "Roots", "RunKey", "create_app", "is_loopback"]
