"""Tests of the wakes (``yieldstar_django/wakes``): the outbox, the relay and the Celery
wake backend."""
