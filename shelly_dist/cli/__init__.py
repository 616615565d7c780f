"""Layer 10 — the ``shelly`` command."""
