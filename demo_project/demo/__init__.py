"""The demo app: store definitions and workflows used by ``python -m demo_project.run_demo``."""
