"""The Agent Card of a served agent: who it is, what it can do, where and how to call it.

Its skills are the agent itself (its config description) followed by each of its skills (their
``SKILL.md`` descriptions), so a caller choosing among agents reads what a shelly agent would
read. With a token the card declares the HTTP bearer scheme and requires it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

from shelly_dist import __version__

if TYPE_CHECKING:
    from shelly_dist.engine.engine import Engine

BEARER = "bearer"
PROTOCOL_VERSION = "1.0"


def agent_card(engine: Engine, agent: str, url: str, *, token: bool) -> AgentCard:
    """The card of config agent ``agent`` served at ``url`` (JSON-RPC), requiring a bearer token
    when ``token``."""
    spec = engine.config.agent(agent)
    assert spec is not None, agent  # the CLI resolved the name
    description = spec.description or f"The shelly agent {agent}."
    skills = [AgentSkill(id=agent, name=agent, description=description, tags=["shelly", "agent"])]
    skills += [AgentSkill(id=f"skill:{s.name}", name=s.name, description=s.description or s.name, tags=["skill"])
               for s in engine.skills.select(spec.skills or None).skills()]
    card = AgentCard(
        name=agent,
        description=description,
        version=__version__,
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION)],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=skills,
    )
    if token:
        card.security_schemes[BEARER].CopyFrom(SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer", description="Authorization: Bearer <SHELLY_A2A_TOKEN>")))
        card.security_requirements.append(SecurityRequirement(schemes={BEARER: StringList()}))
    return card
