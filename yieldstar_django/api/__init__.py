"""The HTTP API: DRF views over the store client and the workflow runtime.

Mount it with ``path("yieldstar/", include("yieldstar_django.api.urls"))``. The pure
modules :mod:`~yieldstar_django.api.json_patch` (RFC 6902) and
:mod:`~yieldstar_django.api.merge_patch` (RFC 7396) need neither Django nor DRF.
"""
