"""Tests of the package as a whole: settings, checks, the app config, migrations and
indexes, the module layout, the public names, a routed second database."""
