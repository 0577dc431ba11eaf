"""Tests of the protocol (``yieldstar_django/core``): pure units and the conformance suite."""
