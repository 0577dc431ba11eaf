"""The execution ids the app derives for writes no workflow makes, and the namespaces
they reserve.

A store write's ``StoreStepId(execution_id, step_key)`` names its owner in the
applied-steps ledger. An HTTP user's ``Idempotency-Key`` writes belong to
``http:<user pk>``, an admin user's edits to ``admin:<user pk>``, and a start with an
``Idempotency-Key`` names its execution ``http:<user pk>:<digest of the key>``. A
schedule's ticks start executions named ``schedule:<name>:<time>``. An execution id a
client picks over HTTP must therefore not start with any of these prefixes
(``is_reserved``); trusted Python code (``start_workflow``) is not checked.
"""

from __future__ import annotations

from typing import Final

#: The prefix of an HTTP user's ledger principal and of an ``Idempotency-Key`` start's id.
HTTP_PREFIX: Final = "http:"
#: The prefix of an admin user's ledger principal.
ADMIN_PREFIX: Final = "admin:"
#: The prefix of the executions a schedule's ticks and triggers start
#: (``runtime.schedule_specs.SCHEDULE_PREFIX``).
SCHEDULE_PREFIX: Final = "schedule:"
#: Execution-id prefixes a client may not use.
RESERVED_PREFIXES: Final = (HTTP_PREFIX, ADMIN_PREFIX, SCHEDULE_PREFIX)


def http_principal(user_pk: object) -> str:
    """The ledger execution id of an HTTP user's writes: ``http:<user pk>``."""
    return f"{HTTP_PREFIX}{user_pk}"


def admin_principal(user_pk: object) -> str:
    """The ledger execution id of an admin user's edits: ``admin:<user pk>``."""
    return f"{ADMIN_PREFIX}{user_pk}"


def is_principal(execution_id: str) -> bool:
    """Whether ``execution_id`` is a ledger principal (``http:<pk>``, ``admin:<pk>``), not
    an execution (``http:<pk>:<digest>`` is the execution an ``Idempotency-Key`` start
    names)."""
    prefix = next((p for p in (HTTP_PREFIX, ADMIN_PREFIX) if execution_id.startswith(p)), None)
    return prefix is not None and ":" not in execution_id[len(prefix) :]


def is_reserved(execution_id: str) -> bool:
    """Whether ``execution_id`` lies in a namespace the app derives ids in."""
    return execution_id.startswith(RESERVED_PREFIXES)


__all__ = [
    "ADMIN_PREFIX",
    "HTTP_PREFIX",
    "RESERVED_PREFIXES",
    "SCHEDULE_PREFIX",
    "admin_principal",
    "http_principal",
    "is_principal",
    "is_reserved",
]
