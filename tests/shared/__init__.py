"""What the tests of several parts share: fixtures on the real databases and in child
processes (``fixtures``, a pytest plugin of ``tests/conftest.py``) and the code the
children run."""
