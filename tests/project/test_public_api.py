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
    "StoreKeyError",
    "ExecutionConflictError",
    "CrossDatabaseWriteError",
    "retry_execution",
    "fork_execution",
    "define_schedule",
    "ScheduleError",
    "pause_schedule",
    "resume_schedule",
    "trigger_schedule",
}


def test_every_pinned_name_is_exported_and_resolves() -> None:
    assert set(yieldstar_django.__all__) >= PINNED
    for name in yieldstar_django.__all__:
        assert getattr(yieldstar_django, name) is not None, name


def test_the_typed_errors_are_the_ones_raised() -> None:
    """The exported errors are the classes the core and the runtime raise, with the bases
    their documentation promises."""
    from yieldstar_django.core.errors import StoreKeyError, StoreKeyTypeError
    from yieldstar_django.runtime.errors import ExecutionConflictError

    assert yieldstar_django.StoreKeyError is StoreKeyError
    assert yieldstar_django.ExecutionConflictError is ExecutionConflictError
    assert issubclass(StoreKeyError, ValueError) and not issubclass(StoreKeyError, TypeError)
    assert issubclass(StoreKeyTypeError, StoreKeyError) and issubclass(StoreKeyTypeError, TypeError)
    assert issubclass(ExecutionConflictError, ValueError)


def test_unknown_names_raise_attribute_error() -> None:
    try:
        yieldstar_django.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")
