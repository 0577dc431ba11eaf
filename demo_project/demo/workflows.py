"""Store definitions and workflows of the demo.

Imported at startup by ``yieldstar_django.apps.autodiscover``. The demo's stores and
workflows are added here together with the runtime.
"""
