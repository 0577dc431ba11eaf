"""Pure unit tests: no database, no broker."""
