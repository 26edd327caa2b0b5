"""The ``retasc`` command-line client (Typer + Rich). Entry point: ``retasc.cli:main``."""

from retasc.cli.main import app, main

__all__ = ["app", "main"]
