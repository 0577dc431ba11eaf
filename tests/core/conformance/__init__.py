"""Conformance tests of the store protocol, run against every StoreClient."""
