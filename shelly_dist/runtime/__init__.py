"""Layer 8 — where runs execute: in-process (``LocalRuntime``) or on a Celery worker pool."""
