"""The compare-and-swap store protocol, free of Django settings and the app registry."""
