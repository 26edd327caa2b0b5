"""Retasc: an agent-first issue tracker, work queue and orchestration layer."""

__version__ = "0.1.0"
