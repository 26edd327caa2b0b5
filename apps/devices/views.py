"""/device/: a signed-in human enters the code the CLI printed, sees what is asking, and
approves or denies it. Plain Django view (session + CSRF), like the Dash."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from apps.core.errors import ServiceError
from apps.devices import services


@login_required
@require_http_methods(["GET", "POST"])
def device(request):
    code = request.POST.get("code") if request.method == "POST" else request.GET.get("code")
    ctx = {"code": code or "", "device": None, "done": None}
    status = 200
    try:
        if request.method == "POST" and request.POST.get("decision") in ("approve", "deny"):
            if request.POST["decision"] == "approve":
                ctx["device"] = services.device_approve(user_code=code, user=request.user)
                ctx["done"] = "approved"
            else:
                ctx["device"] = services.device_deny(user_code=code, user=request.user)
                ctx["done"] = "denied"
        elif code:
            ctx["device"] = services.device_lookup(user_code=code)
    except ServiceError as exc:
        ctx["error"] = exc
        status = exc.http_status
    if ctx["device"] is not None:
        ctx["code"] = services.user_code_display(ctx["device"].user_code)
    return render(request, "devices/device.html", ctx, status=status)
