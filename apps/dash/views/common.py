from __future__ import annotations

from django.shortcuts import render

from apps.core.errors import ServiceError


def field(request, name: str, default: str = "") -> str:
    return (request.POST.get(name, default) or "").strip()


def text(request, name: str) -> str:
    """A textarea's value with browser line endings (CRLF) normalized."""
    return (request.POST.get(name, "") or "").replace("\r\n", "\n").strip()


def lines(value: str) -> list[str]:
    return [line.strip() for line in (value or "").splitlines() if line.strip()]


def csv(value: str) -> list[str]:
    return [part.strip() for part in (value or "").replace("\n", ",").split(",") if part.strip()]


def page_with_error(request, template: str, context: dict, exc: ServiceError):
    return render(request, template, {**context, "error": exc}, status=exc.http_status)


def no_store(response):
    """A page that shows a secret once: never cached, never stored."""
    response["Cache-Control"] = "no-store"
    return response
