import pytest

from tests.fakes.github import FakeGitHub
from tests.fakes.gitlab import FakeGitLab


@pytest.fixture
def fake_github():
    fake = FakeGitHub().start()
    yield fake
    fake.stop()


@pytest.fixture
def fake_gitlab():
    fake = FakeGitLab().start()
    yield fake
    fake.stop()


@pytest.fixture(autouse=True)
def _fast_backoff(settings):
    settings.RETASC_WRITEBACK_BACKOFF_SECONDS = 0


from tests.mcp.conftest import server_factory  # noqa: E402,F401  (the live Daphne for the end-to-end test)
