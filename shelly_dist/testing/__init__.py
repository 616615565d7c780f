"""Test doubles shipped with the package (like pydantic-ai's ``TestModel``), for users' tests too.

- :mod:`shelly_dist.testing.model_server` — a real HTTP server on loopback that speaks the
  OpenAI, Anthropic and Gemini wire formats, records requests and answers from a script;
- :mod:`shelly_dist.testing.batch_api` — its OpenAI Batch and Anthropic Message Batches endpoints,
  strict about what the vendors refuse, completing after a delay (``server.batches``).

The scripted completers live in :mod:`shelly_dist.providers.scripted`.
"""
