"""Tests of yieldstar_django (settings: ``tests.settings``)."""
