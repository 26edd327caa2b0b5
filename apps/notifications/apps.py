from django.apps import AppConfig
from django.conf import settings


class NotificationsConfig(AppConfig):
    """Channels, member bindings, mutes, the outbox and its deliveries, outgoing webhooks."""

    name = "apps.notifications"
    label = "notifications"

    def ready(self):
        if settings.REDIS_URL and not settings.CELERY_TASK_ALWAYS_EAGER:
            # Imported in ready(): tasks import models, allowed once the app registry is ready.
            from apps.notifications import events, tasks

            # After a commit that wrote outbox rows, ask a worker to send now; if the broker
            # is down the rows wait in the database for the periodic run (nothing is lost).
            events.on_outbox(tasks.deliver_task.delay)
