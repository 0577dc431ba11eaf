"""End-to-end tests: the demo project, Celery workers, the HTTP API, a browser."""
