"""yieldstar_django: durable workflows with shared, versioned JSON stores.

The public names are imported lazily (PEP 562), so ``import yieldstar_django`` works before
Django's settings or app registry are ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # core protocol
    "define_store": "yieldstar_django.definitions",
    "StoreDefinition": "yieldstar_django.definitions",  # with the Django schema kinds
    "StoreSnapshot": "yieldstar_django.core.results",
    "StoreUpdateResult": "yieldstar_django.core.results",
    "StoreUpdateFromResult": "yieldstar_django.core.results",
    "StoreUpdated": "yieldstar_django.core.results",
    "StoreUpdateConflict": "yieldstar_django.core.results",
    "StoreDeleteFromResult": "yieldstar_django.core.results",
    "StoreDeleted": "yieldstar_django.core.results",
    "StoreDeleteConflict": "yieldstar_django.core.results",
    "StoreTakeResult": "yieldstar_django.core.results",
    "StoreTakeMatched": "yieldstar_django.core.results",
    "StoreTakeUnmatched": "yieldstar_django.core.results",
    "StoreStepId": "yieldstar_django.core.results",
    "StoreWaiter": "yieldstar_django.core.results",
    "Wake": "yieldstar_django.core.results",
    "StoreValidationError": "yieldstar_django.core.errors",
    "WorkflowValueError": "yieldstar_django.core.errors",
    "StoreContentionError": "yieldstar_django.core.errors",
    "CorruptStateError": "yieldstar_django.core.errors",
    "StoreStepMismatchError": "yieldstar_django.core.errors",
    "StoreKeyError": "yieldstar_django.core.errors",
    "register_error_class": "yieldstar_django.core.errors",
    "StoreClient": "yieldstar_django.core.store",
    "CasStoreClient": "yieldstar_django.core.cas",
    "RetryPolicy": "yieldstar_django.core.commits",
    "MemoryStoreClient": "yieldstar_django.core.memory",
    "DurableLimits": "yieldstar_django.core.durable",
    # Django parts
    "get_store_client": "yieldstar_django.connector",
    "workflow": "yieldstar_django.runtime",
    "start_workflow": "yieldstar_django.runtime",
    "get_execution": "yieldstar_django.runtime",
    "cancel_execution": "yieldstar_django.runtime",
    "retry_execution": "yieldstar_django.runtime",
    "fork_execution": "yieldstar_django.runtime",
    "ExecutionStateError": "yieldstar_django.runtime",
    "ForkPointError": "yieldstar_django.runtime",
    "RetryableError": "yieldstar_django.runtime",
    "ExecutionConflictError": "yieldstar_django.runtime",
    "CrossDatabaseWriteError": "yieldstar_django.runtime",
    "ChildFailedError": "yieldstar_django.runtime",
    "ChildCancelledError": "yieldstar_django.runtime",
    "DeadlineExceededError": "yieldstar_django.runtime",
    # schedules
    "define_schedule": "yieldstar_django.runtime.schedule_specs",
    "ScheduleDefinition": "yieldstar_django.runtime.schedule_specs",
    "ScheduleError": "yieldstar_django.runtime.schedule_specs",
    "create_schedule": "yieldstar_django.runtime.schedules",
    "pause_schedule": "yieldstar_django.runtime.schedules",
    "resume_schedule": "yieldstar_django.runtime.schedules",
    "trigger_schedule": "yieldstar_django.runtime.schedules",
    "UnknownScheduleError": "yieldstar_django.runtime.schedules",
    "define_queue": "yieldstar_django.runtime",
    "Queue": "yieldstar_django.runtime",
}

__all__ = sorted(_EXPORTS)  # type checkers see the explicit re-exports below

if TYPE_CHECKING:  # pragma: no cover
    from .connector import (
        get_store_client as get_store_client,
    )
    from .core.cas import CasStoreClient as CasStoreClient
    from .core.commits import RetryPolicy as RetryPolicy
    from .core.definition import (
        StoreDefinition as StoreDefinition,
    )
    from .core.durable import (
        DurableLimits as DurableLimits,
    )
    from .core.errors import (
        CorruptStateError as CorruptStateError,
        StoreContentionError as StoreContentionError,
        StoreKeyError as StoreKeyError,
        StoreStepMismatchError as StoreStepMismatchError,
        StoreValidationError as StoreValidationError,
        WorkflowValueError as WorkflowValueError,
        register_error_class as register_error_class,
    )
    from .core.memory import (
        MemoryStoreClient as MemoryStoreClient,
    )
    from .core.results import (
        StoreDeleteConflict as StoreDeleteConflict,
        StoreDeleted as StoreDeleted,
        StoreDeleteFromResult as StoreDeleteFromResult,
        StoreSnapshot as StoreSnapshot,
        StoreStepId as StoreStepId,
        StoreTakeMatched as StoreTakeMatched,
        StoreTakeResult as StoreTakeResult,
        StoreTakeUnmatched as StoreTakeUnmatched,
        StoreUpdateConflict as StoreUpdateConflict,
        StoreUpdated as StoreUpdated,
        StoreUpdateFromResult as StoreUpdateFromResult,
        StoreUpdateResult as StoreUpdateResult,
        StoreWaiter as StoreWaiter,
        Wake as Wake,
    )
    from .core.store import StoreClient as StoreClient
    from .definitions import define_store as define_store
    from .runtime import (
        ChildCancelledError as ChildCancelledError,
        ChildFailedError as ChildFailedError,
        CrossDatabaseWriteError as CrossDatabaseWriteError,
        DeadlineExceededError as DeadlineExceededError,
        ExecutionConflictError as ExecutionConflictError,
        ExecutionStateError as ExecutionStateError,
        ForkPointError as ForkPointError,
        Queue as Queue,
        RetryableError as RetryableError,
        cancel_execution as cancel_execution,
        define_queue as define_queue,
        fork_execution as fork_execution,
        get_execution as get_execution,
        retry_execution as retry_execution,
        start_workflow as start_workflow,
        workflow as workflow,
    )
    from .runtime.schedule_specs import (
        ScheduleDefinition as ScheduleDefinition,
        ScheduleError as ScheduleError,
        define_schedule as define_schedule,
    )
    from .runtime.schedules import (
        UnknownScheduleError as UnknownScheduleError,
        create_schedule as create_schedule,
        pause_schedule as pause_schedule,
        resume_schedule as resume_schedule,
        trigger_schedule as trigger_schedule,
    )


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
