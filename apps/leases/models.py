"""Leases have no tables of their own: the Claim row lives in apps.issues.models."""
