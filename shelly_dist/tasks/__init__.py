"""Layer 7 — the task board: shared tasks per session with atomic claims, in memory or in Redis,
and its ``shared_tasks_*`` tools."""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.tasks.base import DEFAULT_UNCLAIMED_TIMEOUT, STATUSES, TERMINAL_STATUSES, Board, Status, Task
    from shelly_dist.tasks.board import BoardBase
    from shelly_dist.tasks.hook import BoardHook, board_hook
    from shelly_dist.tasks.memory import MemoryBoard
    from shelly_dist.tasks.tools import task_tools


# The Redis implementation is imported by path (``shelly_dist.tasks.redis.RedisBoard``), so the
# embedded path never imports redis.

__all__ = [
    "DEFAULT_UNCLAIMED_TIMEOUT",
    "STATUSES",
    "TERMINAL_STATUSES",
    "Board",
    "BoardBase",
    "BoardHook",
    "MemoryBoard",
    "Status",
    "Task",
    "board_hook",
    "task_tools",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
