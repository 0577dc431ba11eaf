"""Timing settings shared by the test process and the processes it starts."""

from __future__ import annotations

from typing import Any

#: A short lease so a killed worker's execution is taken over within seconds; a fast
#: relay so undelivered wakes and timers go out quickly.
E2E_YIELDSTAR: dict[str, Any] = {
    "LEASE_SECONDS": 4,
    "RELAY_DELAY": 0.5,
    "RELAY_INTERVAL": 0.2,
    # The test process publishes to the suite's own broker, which only its workers consume.
    "PUBLISH_IN_TESTS": True,
}
