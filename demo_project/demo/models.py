"""The demo app keeps its state in yieldstar stores; it has no models of its own."""
