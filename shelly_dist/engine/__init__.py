"""Layer 9 — the composition root: config, ``.shelly/``, project context, sessions, the event bus,
and the wiring of providers, toolboxes, agents and runtime."""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.engine.config import (
        config_from_data,
        expand_env,
        find_config,
        fingerprint,
        load_config,
        parse_config,
    )
    from shelly_dist.engine.config_models import (
        AgentConfig,
        AgentOptions,
        Config,
        DistributedConfig,
        EffectConfig,
        MCPServerConfig,
        ProviderConfig,
        ScriptStep,
        ToolboxSpec,
        ToolPolicy,
    )
    from shelly_dist.engine.engine import Engine
    from shelly_dist.engine.eventbus import EventBus, Subscription
    from shelly_dist.engine.project_context import is_knowledge_stale, load_project_context
    from shelly_dist.engine.session import Session
    from shelly_dist.engine.sessions import SessionInfo, SessionStore, new_session_id
    from shelly_dist.engine.shellydir import (
        ShellyDir,
        bootstrap,
        list_templates,
        migrate_permissions,
        state_dir,
        template_config,
    )


__all__ = [
    "AgentConfig",
    "AgentOptions",
    "Config",
    "DistributedConfig",
    "EffectConfig",
    "Engine",
    "EventBus",
    "MCPServerConfig",
    "ProviderConfig",
    "ScriptStep",
    "Session",
    "SessionInfo",
    "SessionStore",
    "ShellyDir",
    "Subscription",
    "ToolPolicy",
    "ToolboxSpec",
    "bootstrap",
    "config_from_data",
    "expand_env",
    "find_config",
    "fingerprint",
    "is_knowledge_stale",
    "list_templates",
    "load_config",
    "load_project_context",
    "migrate_permissions",
    "new_session_id",
    "parse_config",
    "state_dir",
    "template_config",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
