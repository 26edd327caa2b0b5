"""Imports of a backlog from elsewhere (SPEC §9): Linear, a Retasc export, beads JSONL.

Each source is an adapter (``linear_source``, ``retasc_source``, ``beads_source``) that
yields normalized records (``records``); one importer (``importer``) writes them through
the unit of work; ``services`` is the job: start, run, resume, read.
"""
