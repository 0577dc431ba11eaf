"""The store protocol of the seed, free of Django settings and the app registry."""
