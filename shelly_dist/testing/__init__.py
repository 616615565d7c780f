"""Test doubles shipped with the package (like pydantic-ai's ``TestModel``), for users' tests too.

- :mod:`shelly_dist.testing.model_server` — a real HTTP server on loopback that speaks the
  OpenAI, Anthropic and Gemini wire formats, records requests and answers from a script.

The scripted completers live in :mod:`shelly_dist.providers.scripted`.
"""
