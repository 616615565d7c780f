"""The vendors' batch clients against the stand-in: a create whose answer was lost is found again
(``BatchAPI.find``), and a batch's lines come back as replies with the vendor's usage."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest

from shelly_dist.chats import Message, Role
from shelly_dist.models.batching.api import SUCCEEDED
from shelly_dist.providers.anthropic import AnthropicCompleter
from shelly_dist.providers.batches import AnthropicBatches, OpenAIBatches
from shelly_dist.providers.http import aclose_http_client
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.testing.model_server import ModelServer, Reply


@pytest.fixture(autouse=True)
async def _close_http_client() -> AsyncIterator[None]:
    yield
    await aclose_http_client()


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(batch_delay=0, default=Reply(text="hi", usage={"input": 7, "output": 3,
                                                                    "cache_read": 2})) as s:
        yield s


def ask(text: str) -> list[Message]:
    return [Message.text("user", Role.USER, text)]


async def test_openai_finds_the_batch_created_from_an_upload(server: ModelServer) -> None:
    api = OpenAIBatches(OpenAICompleter(model="gpt-4o", base_url=server.url, api_key="k", name="p"))
    lines = [api.encode("c1", ask("q"), [])]
    other = await api.create([api.encode("c0", ask("o"), [])], await api.upload([api.encode("c0", ask("o"), [])]))
    upload = await api.upload(lines)
    assert await api.find(upload, lines, time.time() - 60) is None
    created = await api.create(lines, upload)
    assert await api.find(upload, lines, time.time() - 60) == created != other


async def test_anthropic_finds_the_one_batch_of_as_many_requests_created_since(server: ModelServer) -> None:
    api = AnthropicBatches(AnthropicCompleter(model="claude-sonnet-4-5", base_url=server.url, api_key="k", name="p"))
    since = time.time() - 1
    lines = [api.encode("c1", ask("q"), []), api.encode("c2", ask("r"), [])]
    await api.create([api.encode("c0", ask("o"), [])], "")  # another size: not ours
    created = await api.create(lines, "")
    assert await api.find("", lines, since) == created
    await api.create([api.encode("c3", ask("s"), []), api.encode("c4", ask("t"), [])], "")
    assert await api.find("", lines, since) is None  # two fit: adopting either could be wrong


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_an_ended_batch_reads_back_each_reply_with_the_vendors_usage(server: ModelServer, vendor: str) -> None:
    if vendor == "openai":
        api: OpenAIBatches | AnthropicBatches = OpenAIBatches(
            OpenAICompleter(model="gpt-4o", base_url=server.url, api_key="k", name="p"))
    else:
        api = AnthropicBatches(AnthropicCompleter(model="claude-sonnet-4-5", base_url=server.url, api_key="k",
                                                  name="p"))
    lines = [api.encode("c1", ask("q"), [])]
    batch = await api.create(lines, await api.upload(lines))
    poll = await api.poll(batch)
    assert poll.ended
    [(cid, outcome)] = (await api.results(batch, poll)).items()
    assert cid == "c1" and outcome.state == SUCCEEDED and outcome.reply is not None
    assert outcome.reply.text_content() == "hi"
    usage = outcome.usage
    if vendor == "openai":  # prompt_tokens counts the cached ones
        assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (5, 2, 3)
    else:
        assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (7, 2, 3)
