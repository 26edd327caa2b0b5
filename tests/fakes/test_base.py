"""The fake server base itself: routes, recording, scripted failures, down and up."""

import httpx2 as httpx
import pytest

from tests.fakes.base import FakeServer


def test_routes_record_and_scripted_failures():
    fake = FakeServer().route("POST", r"/things/(?P<n>\d+)", lambda req: (201, {"n": int(req.match["n"]), "got": req.json}))
    with fake:
        assert httpx.post(f"{fake.url}/things/7", json={"a": 1}).json() == {"n": 7, "got": {"a": 1}}
        fake.fail_next(1, 429, headers={"Retry-After": "3"})
        limited = httpx.post(f"{fake.url}/things/8", json={})
        assert (limited.status_code, limited.headers["retry-after"]) == (429, "3")
        assert httpx.post(f"{fake.url}/things/9", json={}).status_code == 201
        assert httpx.get(f"{fake.url}/nope").status_code == 404
        assert [r.path for r in fake.seen("POST")] == ["/things/7", "/things/8", "/things/9"]


def test_down_then_up_on_the_same_port():
    fake = FakeServer().route("GET", r"/ping", lambda req: (200, {"ok": True})).start()
    url = fake.url
    fake.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/ping", timeout=2)
    fake.start()
    assert fake.url == url and httpx.get(f"{url}/ping").json() == {"ok": True}
    fake.stop()
