"""Notification endpoints (SPEC §10): org channels, bindings, outgoing webhooks, retries.

Thin: parse, call one ``apps.notifications`` service, render. Agents keys are refused by
the services (channels and webhooks are an owner's, bindings a person's).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from apps.api.parsers import body_fields
from apps.api.schema import ref
from apps.api.views import ApiView
from apps.notifications import selectors, services

_ERRORS = {code: ref("Error") for code in (400, 401, 403, 404, 409)}


class Channels(ApiView):
    @extend_schema(
        operation_id="list_channels",
        summary="The org's notification channels.",
        tags=["notifications"],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        return Response({"channels": selectors.channels_list(actor=request.auth)})

    @extend_schema(
        operation_id="create_channel",
        summary="Add a notification channel (owner): slack, discord, telegram or email.",
        tags=["notifications"],
        request=OpenApiTypes.OBJECT,
        responses={201: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def post(self, request):
        data = body_fields(request.data, ("kind", "botToken", "signingSecret", "publicKey"), ("kind",))
        channel = services.channel_create(
            actor=request.auth,
            kind=data["kind"],
            bot_token=data.get("botToken"),
            signing_secret=data.get("signingSecret"),
            public_key=data.get("publicKey"),
        )
        return Response({"channelId": str(channel.pk), "webhookUrl": services.webhook_url(channel)}, status=201)


class ChannelTest(ApiView):
    @extend_schema(
        operation_id="test_channel",
        summary="Send a test message to your own bindings on a channel.",
        tags=["notifications"],
        parameters=[OpenApiParameter("channel", OpenApiTypes.STR, OpenApiParameter.PATH)],
        request=None,
        responses={202: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def post(self, request, channel):
        return Response({"queued": services.channel_send_test(actor=request.auth, channel_id=channel)}, status=202)


class MyBindings(ApiView):
    @extend_schema(
        operation_id="list_my_bindings",
        summary="Your bindings in this org.",
        tags=["notifications"],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        return Response({"bindings": selectors.bindings_list(actor=request.auth)})

    @extend_schema(
        operation_id="create_binding_code",
        summary="A single-use binding code (10 minutes) for a chat channel; e-mail binds your verified address.",
        tags=["notifications"],
        request=OpenApiTypes.OBJECT,
        responses={201: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def post(self, request):
        data = body_fields(request.data, ("channelId",), ("channelId",))
        channel = services.channel_get(org_id=request.auth.org.pk, channel_id=data["channelId"])
        if channel.kind == "email":
            binding = services.binding_email(actor=request.auth, channel_id=channel.pk)
            return Response({"bindingId": str(binding.pk), "address": binding.label}, status=201)
        code, expires = services.binding_code_create(actor=request.auth, channel_id=channel.pk)
        return Response({"code": code, "expiresAt": expires.isoformat()}, status=201)


class MyBinding(ApiView):
    @extend_schema(
        operation_id="remove_binding",
        summary="Remove one of your bindings.",
        tags=["notifications"],
        parameters=[OpenApiParameter("binding", OpenApiTypes.STR, OpenApiParameter.PATH)],
        responses={204: None, **_ERRORS},
    )
    def delete(self, request, binding):
        services.binding_remove(actor=request.auth, binding_id=binding)
        return Response(status=204)


class Webhooks(ApiView):
    @extend_schema(
        operation_id="list_webhooks",
        summary="The org's outgoing webhooks (owner).",
        tags=["notifications"],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        return Response({"webhooks": selectors.webhooks_list(actor=request.auth)})

    @extend_schema(
        operation_id="create_webhook",
        summary="Register an outgoing webhook (owner); the signing secret is shown once.",
        tags=["notifications"],
        request=OpenApiTypes.OBJECT,
        responses={201: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def post(self, request):
        data = body_fields(request.data, ("url", "events"), ("url", "events"))
        hook, secret = services.webhook_create(actor=request.auth, url=data["url"], events=data["events"])
        return Response({"webhookId": str(hook.pk), "secret": secret, "events": hook.events}, status=201)


class DeliveryRetry(ApiView):
    @extend_schema(
        operation_id="retry_delivery",
        summary="Retry a dead letter or redeliver a webhook delivery (owner).",
        tags=["notifications"],
        parameters=[OpenApiParameter("delivery", OpenApiTypes.STR, OpenApiParameter.PATH)],
        request=None,
        responses={202: OpenApiTypes.OBJECT, **_ERRORS},
    )
    def post(self, request, delivery):
        services.delivery_retry(actor=request.auth, delivery_id=delivery)
        return Response({"status": "pending"}, status=202)
