"""Tests of the database store client (``yieldstar_django/connector``) on real databases."""
