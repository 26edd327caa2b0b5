"""Fakes of third-party HTTP services, one small server per provider (SPEC: no test touches
the internet). Each provider's fake is a module here built on ``tests.fakes.base.FakeServer``
and reused by every test that needs that provider."""
