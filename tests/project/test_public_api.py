"""The pinned public names (docs/reference/api.md) are importable from ``yieldstar_django``."""

from __future__ import annotations

import yieldstar_django

PINNED = {
    "define_store",
    "StoreDefinition",
    "StoreSnapshot",
    "StoreUpdateResult",
    "StoreUpdateFromResult",
    "StoreDeleteFromResult",
    "StoreTakeResult",
    "StoreStepId",
    "StoreWaiter",
    "StoreValidationError",
    "WorkflowValueError",
    "StoreContentionError",
    "StoreClient",
    "CasStoreClient",
    "MemoryStoreClient",
    "get_store_client",
    "workflow",
    "start_workflow",
    "get_execution",
    "cancel_execution",
    "retry_execution",
    "fork_execution",
}


def test_every_pinned_name_is_exported_and_resolves() -> None:
    assert set(yieldstar_django.__all__) >= PINNED
    for name in yieldstar_django.__all__:
        assert getattr(yieldstar_django, name) is not None, name


def test_unknown_names_raise_attribute_error() -> None:
    try:
        yieldstar_django.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")
