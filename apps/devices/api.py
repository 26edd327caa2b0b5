"""HTTP endpoints for the ``retasc`` CLI under /api/v1/cli/: the device flow, and the
human actions the agent-facing API does not offer (orgs, projects, invites, agent keys).

Each view parses its input, calls one service or selector, and renders JSON; refusals
are the API's ``{code, message, ...}`` (``apps.api.errors``). The views authenticate a
personal token (``rtscpat_…``) or a signed-in session, never an agent key. They are kept
out of the OpenAPI document for now (``schema = None``).
"""

from __future__ import annotations

from django.conf import settings
from rest_framework import authentication, permissions, throttling
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.auth import KeyRateThrottle, SessionOrgAuthentication
from apps.api.views import FirstRenderer
from apps.core.clientip import request_ip
from apps.core.errors import invalid
from apps.core.formats import iso
from apps.devices import selectors, services
from apps.devices.auth import HasHumanActor, IsHuman, PersonalTokenAuthentication, PersonalTokenUserAuthentication, current_token
from apps.leases.revocation import key_revoke_as as key_revoke
from apps.leases.revocation import key_rotate_as as key_rotate
from apps.orgs.selectors import invites_list, project_shape
from apps.orgs.services import invite_create, invite_redeem, invite_revoke, org_create_for
from apps.orgs.services import key_mint_as as key_mint
from apps.orgs.services import project_create_as as project_create


def _body(request, allowed: tuple[str, ...]) -> dict:
    data = request.data if isinstance(request.data, dict) else None
    if data is None:
        raise invalid("body", "The request body must be a JSON object.")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise invalid(unknown[0], f"Unknown field {unknown[0]!r}; this endpoint takes {', '.join(allowed) or 'nothing'}.")
    return {k: v for k, v in data.items() if v is not None}


def _text(data: dict, name: str, *, required: bool = False, limit: int = 200) -> str:
    value = data.get(name, "")
    if not isinstance(value, str) or len(value) > limit or (required and not value.strip()):
        raise invalid(name, f"{name} is {'required, ' if required else ''}text up to {limit} characters.")
    return value.strip()


class IpRateThrottle(throttling.SimpleRateThrottle):
    """Unauthenticated device-flow calls, per client address. The address believes
    X-Forwarded-For only from RETASC_TRUSTED_PROXIES (DRF's own get_ident takes the
    header from anyone, so a client could name a fresh bucket per request)."""

    scope = "cli-device"
    rate = "60/min"

    def get_ident(self, request):
        return request_ip(request) or "unknown"

    def get_cache_key(self, request, view):
        return f"retasc:cli-device:{self.get_ident(request)}"


class CliView(APIView):
    schema = None
    content_negotiation_class = FirstRenderer
    authentication_classes = [PersonalTokenAuthentication, SessionOrgAuthentication]
    permission_classes = [HasHumanActor]
    throttle_classes = [KeyRateThrottle]


class UserView(CliView):
    """Works before the person belongs to any org."""

    authentication_classes = [PersonalTokenUserAuthentication, authentication.SessionAuthentication]
    permission_classes = [IsHuman]
    throttle_classes = []


# --- device flow ---------------------------------------------------------------------------


class DeviceStart(CliView):
    authentication_classes = []
    permission_classes = [permissions.AllowAny]
    throttle_classes = [IpRateThrottle]

    def post(self, request):
        data = _body(request, ("clientName",))
        device, raw = services.device_start(client_name=_text(data, "clientName", limit=120), client_ip=request_ip(request))
        code = services.user_code_display(device.user_code)
        verify = f"{settings.PUBLIC_URL}/device/"
        return Response(
            {
                "deviceCode": raw,
                "userCode": code,
                "verificationUri": verify,
                "verificationUriComplete": f"{verify}?code={code}",
                "interval": device.interval,
                "expiresIn": int(services.DEVICE_CODE_TTL.total_seconds()),
            }
        )


class DevicePoll(DeviceStart):
    def post(self, request):
        data = _body(request, ("deviceCode",))
        token, raw = services.device_poll(device_code=_text(data, "deviceCode", required=True))
        return Response({"token": raw, "tokenPrefix": token.prefix, "email": token.user.email})


class Logout(UserView):
    def post(self, request):
        token = current_token(request)
        if token is None:
            raise invalid("Authorization", "Logout revokes a personal token; send it as the bearer.")
        return Response({"revoked": services.personal_token_revoke(token=token), "tokenPrefix": token.prefix})


class Me(UserView):
    def get(self, request):
        return Response(selectors.me(user=request.user, token=current_token(request)))


# --- orgs, projects, invites ------------------------------------------------------------------


class Orgs(UserView):
    def get(self, request):
        return Response({"orgs": selectors.orgs_for_user(user=request.user)})

    def post(self, request):
        data = _body(request, ("name",))
        org = org_create_for(user=request.user, name=_text(data, "name", required=True, limit=120))
        return Response({"slug": org.slug, "name": org.name, "role": "owner", "projects": []}, status=201)


class Projects(CliView):
    def post(self, request):
        data = _body(request, ("prefix", "name"))
        project = project_create(
            actor=request.auth, prefix=_text(data, "prefix", required=True, limit=10), name=_text(data, "name", limit=120)
        )
        return Response(project_shape(project), status=201)


class Invites(CliView):
    def get(self, request):
        return Response({"invites": invites_list(actor=request.auth)})

    def post(self, request):
        data = _body(request, ("expiresDays", "role"))
        invite, raw = invite_create(actor=request.auth, expires_days=data.get("expiresDays", 7), role=data.get("role", "member"))
        return Response(
            {
                "id": invite.pk,
                "code": raw,
                "prefix": invite.prefix,
                "role": invite.role,
                "org": request.auth.org.slug,
                "expiresAt": iso(invite.expires_at),
                "url": f"{settings.PUBLIC_URL}/invite/{raw}/",
                "joinCommand": f"retasc join {raw}",
            },
            status=201,
        )


class InviteRevoke(CliView):
    def post(self, request, ref):
        invite_id = selectors.invite_resolve(actor=request.auth, ref=ref)
        invite_revoke(actor=request.auth, invite_id=invite_id)
        return Response({"id": invite_id, "status": "revoked"})


class InviteRedeem(UserView):
    def post(self, request):
        data = _body(request, ("code",))
        membership = invite_redeem(code=_text(data, "code", required=True, limit=100), user=request.user)
        org = membership.org
        return Response(
            {
                "org": {"slug": org.slug, "name": org.name},
                "role": membership.role,
                "projects": [{"prefix": p.prefix, "name": p.name} for p in org.projects.order_by("prefix")],
            }
        )


# --- agent keys ------------------------------------------------------------------------------


class Keys(CliView):
    def get(self, request):
        include = request.query_params.get("all", "") in ("1", "true", "yes")
        return Response({"keys": selectors.keys_list(actor=request.auth, include_revoked=include)})

    def post(self, request):
        data = _body(request, ("project", "runtime", "label"))
        actor = request.auth
        project = _text(data, "project", limit=10) or (actor.project.prefix if actor.project else "")
        key, raw = key_mint(
            actor=actor,
            project_prefix=project,
            runtime=_text(data, "runtime", required=True, limit=40),
            label=_text(data, "label", limit=120),
        )
        return Response({"agentKey": raw, "key": selectors.key_shape(key), "mcpUrl": f"{settings.PUBLIC_URL}/mcp"}, status=201)


class KeyRotate(CliView):
    def post(self, request, ref):
        key_id = selectors.key_resolve(actor=request.auth, ref=ref)
        key, raw = key_rotate(actor=request.auth, key_id=key_id)
        return Response({"agentKey": raw, "key": selectors.key_shape(key), "replaced": key_id})


class KeyRevoke(CliView):
    def post(self, request, ref):
        key = key_revoke(actor=request.auth, key_id=selectors.key_resolve(actor=request.auth, ref=ref))
        key.refresh_from_db()
        return Response(selectors.key_shape(key))
