"""Layer 6 — the agent: the ReAct loop as a resumable step machine, the system prompt, the
registry, the orchestration tools (``list_agents``, ``delegate``, ``task_complete``) and middleware.

The agent never knows which runtime runs it: a step can stop at a delegation as *suspended*, and
whoever runs the step decides how the children run.
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.agent import children
    from shelly_dist.agent.agent import Agent
    from shelly_dist.agent.approval import ApprovalPolicy
    from shelly_dist.agent.board import TaskBoardHook
    from shelly_dist.agent.children import progress_sink
    from shelly_dist.agent.delegation import board_status, child_messages, entry_from_outcome
    from shelly_dist.agent.middleware import Middleware, logger, output_guardrail, recovery, timeout
    from shelly_dist.agent.naming import instance_name, task_slug
    from shelly_dist.agent.options import AgentOptions
    from shelly_dist.agent.reactor import Member, Reactor
    from shelly_dist.agent.records import ChildRequest, CompletionResult, DelegateEntry, Phase, RunState
    from shelly_dist.agent.registry import Entry, Factory, Registry
    from shelly_dist.agent.run import Continue, Delegator, Finished, Run, StepOutcome, Suspended
    from shelly_dist.agent.spawn import Spawned, Spawner


__all__ = [
    "Agent",
    "AgentOptions",
    "ApprovalPolicy",
    "ChildRequest",
    "CompletionResult",
    "Continue",
    "DelegateEntry",
    "Delegator",
    "Entry",
    "Factory",
    "Finished",
    "Member",
    "Middleware",
    "Phase",
    "Reactor",
    "Registry",
    "Run",
    "RunState",
    "Spawned",
    "Spawner",
    "StepOutcome",
    "Suspended",
    "TaskBoardHook",
    "board_status",
    "child_messages",
    "children",
    "entry_from_outcome",
    "instance_name",
    "logger",
    "output_guardrail",
    "progress_sink",
    "recovery",
    "task_slug",
    "timeout",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
