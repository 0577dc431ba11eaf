"""Integration tests: a real database (and a broker where marked ``celery``)."""
