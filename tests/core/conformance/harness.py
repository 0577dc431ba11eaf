"""The harness contract the conformance suite runs against, and its in-memory implementation.

A harness owns one fresh client and lets tests observe what the protocol promises without
reaching into storage: the wakes delivered, the changed paths of each committed version and
the registered waiters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from yieldstar_django.core.cas import CasStoreClient
from yieldstar_django.core.commits import RetryPolicy
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.durable import DurableLimits
from yieldstar_django.core.memory import MemoryStoreClient
from yieldstar_django.core.results import StoreWaiter, Wake
from yieldstar_django.core.types import StorePath


class Harness(Protocol):
    name: str
    client: CasStoreClient
    wakes: list[Wake]

    def changed_paths(self, definition: StoreDefinition, id: str) -> list[tuple[StorePath, ...]]:
        """Changed paths of each committed version after version 0, ascending."""

    def waiters(self, definition: StoreDefinition, id: str) -> list[StoreWaiter]:
        """Waiters registered on the store."""

    def configure(self, **yieldstar: Any) -> Any:
        """Context manager applying YIELDSTAR settings (CAS_MAX_ATTEMPTS, MAX_DEPTH, ...)."""


class MemoryHarness:
    name = "memory"

    def __init__(self) -> None:
        self.wakes: list[Wake] = []
        self.client = MemoryStoreClient(on_wake=self.wakes.extend)

    def changed_paths(self, definition: StoreDefinition, id: str) -> list[tuple[StorePath, ...]]:
        return [
            v.changed_paths
            for v in self.client.versions
            if v.store_name == definition.name and v.store_id == id and v.version > 0
        ]

    def waiters(self, definition: StoreDefinition, id: str) -> list[StoreWaiter]:
        return self.client.waiters(definition, id)

    @contextmanager
    def configure(self, **yieldstar: Any) -> Iterator[None]:
        limits, retry = self.client._limits, self.client._retry
        self.client._limits = DurableLimits(
            max_bytes=yieldstar.get("MAX_STATE_BYTES", limits.max_bytes),
            max_depth=yieldstar.get("MAX_DEPTH", limits.max_depth),
            max_nodes=yieldstar.get("MAX_STATE_NODES", limits.max_nodes),
        )
        self.client._retry = RetryPolicy(
            max_attempts=yieldstar.get("CAS_MAX_ATTEMPTS", retry.max_attempts),
            base_delay=yieldstar.get("CAS_BACKOFF_BASE", retry.base_delay),
            max_delay=yieldstar.get("CAS_BACKOFF_MAX", retry.max_delay),
        )
        try:
            yield
        finally:
            self.client._limits, self.client._retry = limits, retry
