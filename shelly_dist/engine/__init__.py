"""Layer 9 — the composition root: config, ``.shelly/``, project context, sessions, the event bus,
and the wiring of providers, toolboxes, agents and runtime."""
