"""The suite's guard: a provider pointed at a real API fails the test instead of calling it."""

from __future__ import annotations

import re

import pytest

from shelly_dist import Chat, Message, Role
from shelly_dist.providers.factory import create_completer


async def test_a_provider_call_to_a_non_loopback_host_fails_the_test():
    completer = create_completer("openai", name="real", model="gpt", base_url="https://api.openai.com", api_key="k",
                                 rate_limit=None)
    with pytest.raises(AssertionError, match=re.escape("real model API: https://api.openai.com/v1/chat/completions")):
        await completer.complete(Chat([Message.text("user", Role.USER, "hi")]), [])


async def test_a_provider_batch_sent_to_a_non_loopback_host_fails_the_test():
    from shelly_dist.models.batching import BatchSettings
    from shelly_dist.providers.batches import batch_api
    from shelly_dist.providers.openai import OpenAICompleter

    api = batch_api("openai", OpenAICompleter(model="gpt", base_url="https://api.openai.com", api_key="k"))
    assert api is not None and BatchSettings.of() is not None
    with pytest.raises(AssertionError, match=re.escape("real model API: https://api.openai.com/v1/batches/b1")):
        await api.poll("b1")
