"""The store instance a leased claim was taken from (``ClaimLeaseRecord.instance_id``): a
hand-back goes only to that instance, never to a store deleted since (which it would
create again) nor to a new instance of it. Leases recorded before have it empty."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0014_admin_page_indexes")]

    operations = [
        migrations.AddField(
            model_name="claimleaserecord",
            name="instance_id",
            field=models.CharField(blank=True, default="", max_length=64),
        )
    ]
