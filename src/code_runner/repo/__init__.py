"""The git side of code-runner: `git` runs every git command (hardened); `snapshot` takes
before/after fingerprints of a source repo and says how they differ."""
