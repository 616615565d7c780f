"""Benchmarks of shelly-dist against raw Celery and asyncio on the same machine (issue 9).

Run ``python -m bench`` (``--quick`` for tiny sizes, ``--only NAME``, ``--runs N``, ``--write``).
Absolute times on a shared machine mean little, so every figure is a ratio against a reference
measured in the same run. One module per scenario; :mod:`bench.harness` starts and reaps the
processes, :mod:`bench.model` is the loopback model, :mod:`bench.raw_celery` the reference app.
"""
