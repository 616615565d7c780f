"""A2A (Agent2Agent v1.0): serving the project's agents to other agent platforms, and delegating
to remote A2A agents, with the official ``a2a-sdk``.

The SDK is an optional extra (``pip install 'shelly-dist[a2a]'``: it brings protobuf, gRPC stubs
and google-api-core, which a worker pool does not need); :func:`require_sdk` turns its absence into
one line naming the pip command.
"""

from __future__ import annotations

from shelly_dist.errors import UsageError

PIP_LINE = "pip install 'shelly-dist[a2a]'"


def require_sdk(what: str) -> None:
    """Fail with a ``UsageError`` naming the pip line when ``a2a-sdk`` is not installed."""
    try:
        import a2a.server  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"{what}: the A2A SDK (a2a-sdk) is not installed: {PIP_LINE}") from exc
