"""Seeing the pool from outside (DESIGN §9): Prometheus metrics, structured logs.

The lowest layer: it imports nothing of shelly_dist but the top-level modules (events, identity), so every
layer above may record into it with one call.
"""
