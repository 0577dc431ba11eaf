"""The example app of docs/howto/testing.md: the page shows these files, the test suite
runs them, and scripts/check_startproject.sh copies them into a brand-new project."""
