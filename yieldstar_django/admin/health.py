"""The admin index's health banner: the default admin site shows
``yieldstar_django/admin/index.html`` (the stock index with the banner of failing health
checks above it) unless the project gave it an index template of its own."""

from __future__ import annotations

from django.contrib import admin

__all__ = ["INDEX_TEMPLATE", "show_banner"]

#: The index template with the banner (it extends ``admin/index.html``).
INDEX_TEMPLATE = "yieldstar_django/admin/index.html"


def show_banner(site: admin.AdminSite) -> None:
    """Give ``site`` the index template with the banner, unless it has one of its own."""
    if site.index_template is None:
        site.index_template = INDEX_TEMPLATE


show_banner(admin.site)
