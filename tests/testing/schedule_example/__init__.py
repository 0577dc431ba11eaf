"""The example of docs/howto/schedules.md: the page shows these files, the test suite runs
them."""
