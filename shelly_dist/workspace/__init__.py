"""Layer 7 — a team's workspace (DESIGN §7): channel, inboxes, documents, resources, status and
proposals of one session, in memory or in Redis, and the ``team`` tools over it."""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.workspace.base import DEFAULT_DOCUMENT, INLINE_LIMIT, WorkspaceBase, resource_id
    from shelly_dist.workspace.base import WorkspaceBase as Workspace
    from shelly_dist.workspace.memory import MemoryWorkspace
    from shelly_dist.workspace.models import USER, AgentStatus, ChannelMessage, DeadLetter, InboxEntry
    from shelly_dist.workspace.proposals import Proposal


# The Redis implementation is imported by path (``shelly_dist.workspace.redis.RedisWorkspace``),
# so the embedded path never imports redis.

__all__ = [
    "DEFAULT_DOCUMENT",
    "INLINE_LIMIT",
    "USER",
    "AgentStatus",
    "ChannelMessage",
    "DeadLetter",
    "InboxEntry",
    "MemoryWorkspace",
    "Proposal",
    "Workspace",
    "WorkspaceBase",
    "resource_id",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
