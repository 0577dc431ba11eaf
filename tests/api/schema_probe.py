"""Run as a script: serve ``GET /yieldstar/schema/`` once under ``DJANGO_SETTINGS_MODULE``
(no database query) and print the status code and the documented paths as JSON."""

from __future__ import annotations

import json


def main() -> None:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.urls import resolve
    from rest_framework.settings import api_settings
    from rest_framework.test import APIRequestFactory, force_authenticate

    request = APIRequestFactory().get("/yieldstar/schema/")
    force_authenticate(request, user=User(username="probe", is_superuser=True, is_active=True))
    response = resolve("/yieldstar/schema/").func(request)
    response.render()
    body = json.loads(response.content)
    print(
        json.dumps(
            {
                "default_schema_class": api_settings.DEFAULT_SCHEMA_CLASS.__module__,
                "status": response.status_code,
                "paths": sorted(body.get("paths", {})),
                "body": body if response.status_code != 200 else None,
            }
        )
    )


if __name__ == "__main__":
    main()
