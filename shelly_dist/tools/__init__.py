"""Layer 4 — tools the model can call: ``Tool``, ``ToolBox`` and schemas from pydantic models.

A tool's handler takes the raw JSON arguments and returns text; raising means an error result.
Built-in toolboxes, MCP client and server, permissions and policy live in submodules.
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.tools.loopdetect import LoopDetector
    from shelly_dist.tools.permissions import Approver, HeadlessApprover, InteractiveApprover, Permissions
    from shelly_dist.tools.policy import ToolPolicy
    from shelly_dist.tools.schema import schema_for
    from shelly_dist.tools.tool import Handler, Tool, tool_from_model
    from shelly_dist.tools.toolbox import ToolBox


__all__ = [
    "Approver",
    "Handler",
    "HeadlessApprover",
    "InteractiveApprover",
    "LoopDetector",
    "Permissions",
    "Tool",
    "ToolBox",
    "ToolPolicy",
    "schema_for",
    "tool_from_model",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
