"""shelly-dist: teams of LLM agents, run in one process or across a Celery worker pool."""

__version__ = "0.1.0"
