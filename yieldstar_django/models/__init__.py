"""Django models: stores, versions, ledger, waiters and wake intents (``stores``); workflow
executions and their heap (``runtime``); the relay's heartbeats (``relay``); schedules
(``schedules``); the HTTP API's
idempotency keys (``api``)."""

from .api import *  # noqa: F403
from .claim_leases import *  # noqa: F403
from .relay import *  # noqa: F403
from .runtime import *  # noqa: F403
from .schedules import *  # noqa: F403
from .stores import *  # noqa: F403
