"""Caller-chosen run ids (the Python API's ``send_messages(run_id=…)`` and ``CeleryRuntime.submit``):
Redis keys are built from them, so a ``:`` or a brace is refused by name (issue 38: ``a:b``'s keys
collided with another run's), before anything is written."""

from __future__ import annotations

import pytest

from shelly_dist.errors import UsageError
from shelly_dist.runtime.base import check_run_id


@pytest.mark.parametrize("run_id", ["root", "item-1", "b0123abcd.2", "r_9"])
def test_a_plain_run_id_is_taken(run_id: str) -> None:
    assert check_run_id(run_id, "submit") == run_id


@pytest.mark.parametrize("run_id", ["a:b", "{root}", "", "two words", "-lead", "x" * 129, "new\nline"])
def test_a_run_id_that_would_collide_keys_is_a_usage_error_naming_it(run_id: str) -> None:
    with pytest.raises(UsageError, match=r"^submit: run id .* may hold only letters"):
        check_run_id(run_id, "submit")


async def test_a_session_refuses_a_colon_run_id_before_running_anything(tmp_path) -> None:
    from shelly_dist.chats import Message, Role
    from shelly_dist.engine import Engine
    from shelly_dist.engine.config_models import Config

    config = Config.model_validate({
        "providers": [{"name": "s", "kind": "scripted", "model": "script", "script": {"solo": ["hi"]}}],
        "agents": [{"name": "solo"}],
    })
    async with await Engine.open(config, shelly_dir=tmp_path) as engine:
        session = engine.session("solo")
        with pytest.raises(UsageError, match=r"run id 'a:b'"):
            await session.send_messages([Message.text("user", Role.USER, "go")], run_id="a:b")
