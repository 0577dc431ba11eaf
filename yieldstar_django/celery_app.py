"""Which Celery app publishes wakes, and the trap of Celery's unconfigured default app.

A process that never imports the project's Celery app (the usual
``from .celery import app as celery_app`` in the project package's ``__init__``) publishes
with Celery's default app: to the default broker, where no worker listens, so the wakes
are lost. :func:`require_configured_app` refuses to publish with that app (the Celery wake
backend calls it: the intent stays undelivered and the relay retries it),
``checks.check_celery_app`` reports it as ``yieldstar.W003``, and :func:`describe_app`
names the app and its broker (passwords masked) for the relay's startup log line.
"""

from __future__ import annotations

from celery import Celery, _state
from kombu.utils.url import maybe_sanitize_url

HINT = (
    "Import the project's Celery app in every process that starts workflows or writes "
    "stores (web, relay, workers, shells): `from .celery import app as celery_app` in the "
    "project package's __init__.py, as Celery's Django guide shows."
)


class UnconfiguredCeleryApp(RuntimeError):
    """Celery's current app is its unconfigured default; publishing would lose the wakes."""


def current_app() -> Celery:
    """Celery's current app (the one ``send_task`` of the wake backend uses)."""
    app: Celery = _state.get_current_app()
    return app


def is_default_app(app: Celery) -> bool:
    """Whether ``app`` is the fallback app Celery makes up when no app was created: the
    default app named ``"default"`` that Celery creates with no fixups and without making
    it current (``Celery("default", fixups=[], set_as_current=False)``). An app made default
    with ``set_default()`` is the project's own, and so is a project app that happens to be
    named ``"default"``: it has Celery's fixups (the Django one made it the default app)."""
    return (
        app is getattr(_state, "default_app", None)
        and app.main == "default"
        and not app.set_as_current
        and not app.fixups
    )


def require_configured_app() -> Celery:
    """The current app; ``UnconfiguredCeleryApp`` if it is Celery's default one."""
    app = current_app()
    if is_default_app(app):
        raise UnconfiguredCeleryApp(
            "Celery's current app is its unconfigured default app (broker "
            f"{masked_broker_url(app)}): the project's Celery app was never imported in "
            f"this process, and its wakes would go where no worker listens. {HINT}"
        )
    return app


def masked_broker_url(app: Celery) -> str:
    """The app's broker URL with any password masked. A failover broker (URLs separated by
    ``;``, or a list, as Celery accepts: Redis Sentinel is configured so) is masked URL by
    URL and shown joined by ``;``; a URL that does not parse is not shown. Never raises."""
    url = app.conf.broker_url or "amqp://guest:**@localhost:5672//"
    urls = url if isinstance(url, list | tuple) else str(url).split(";")
    return ";".join(_masked(str(one).strip()) for one in urls if str(one).strip())


def _masked(url: str) -> str:
    """One broker URL with its password masked, or only its scheme if it does not parse."""
    try:
        return str(maybe_sanitize_url(url))
    except ValueError:
        return f"{url.split('://', 1)[0]}://(a URL that does not parse, not shown)"


#: URL schemes of Celery's Redis transport (priorities emulated with one list per step,
#: lower numbers first) and of its AMQP ones (RabbitMQ: higher numbers first, on a queue
#: declared with ``x-max-priority``).
REDIS_SCHEMES = frozenset({"redis", "rediss", "sentinel", "redis+socket"})
AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp", "librabbitmq"})


def broker_transport(app: Celery) -> str:
    """The kombu transport ``app`` publishes with: ``broker_transport`` if set, else the
    scheme of its (first) write broker URL; Celery's default broker is ``amqp``."""
    conf = app.conf
    if conf.broker_transport:
        return str(conf.broker_transport)
    url = conf.broker_write_url or conf.broker_url or "amqp://"
    first = url[0] if isinstance(url, list | tuple) else str(url).split(";")[0]
    return first.split("://", 1)[0].strip().lower()


def broker_kind(app: Celery) -> str:
    """``"redis"``, ``"amqp"`` or ``"other"``: the family of :func:`broker_transport`.
    Never raises."""
    try:
        transport = broker_transport(app)
    except Exception:
        return "other"
    if transport in REDIS_SCHEMES:
        return "redis"
    if transport in AMQP_SCHEMES:
        return "amqp"
    return "other"


def describe_app(app: Celery) -> str:
    """``"<main> (broker <masked url>)"``, or says it is the unconfigured default app."""
    name = "Celery's unconfigured default app" if is_default_app(app) else repr(app.main)
    return f"{name} (broker {masked_broker_url(app)})"


__all__ = [
    "AMQP_SCHEMES",
    "REDIS_SCHEMES",
    "UnconfiguredCeleryApp",
    "broker_kind",
    "broker_transport",
    "current_app",
    "describe_app",
    "is_default_app",
    "masked_broker_url",
    "require_configured_app",
]
