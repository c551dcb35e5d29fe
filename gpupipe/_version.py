"""The version of gpupipe, in one place: the package face, the CLI, run.json and the build
(``pyproject.toml`` reads it) take it from here."""

__version__ = "0.1.0"
