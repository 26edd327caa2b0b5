"""Test settings whose URLs include one that fails (tests.dash.boom_urls), for a live
server that shows the 500 page as production would (DEBUG off)."""

from retasc.settings.test import *  # noqa: F403

ROOT_URLCONF = "tests.dash.boom_urls"
DEBUG = False
