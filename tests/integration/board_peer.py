"""A peer process for the cross-process blackboard and task-board tests.

``python board_peer.py URL PREFIX SESSION COMMAND ARGS…`` prints one line with its outcome.
Watches use a 60 s poll interval so that only a pub/sub wake-up (never the polling fallback) can
end them within the tests' deadlines: a lost wake-up shows up as a timeout error.
"""

from __future__ import annotations

import asyncio
import json
import sys

from shelly_dist.errors import StoreError
from shelly_dist.identity import acting_as
from shelly_dist.redisio.connection import connect
from shelly_dist.redisio.keys import Keys
from shelly_dist.state.redis import RedisStore
from shelly_dist.tasks.redis import RedisBoard

POLL = 60.0


async def main(url: str, prefix: str, session: str, command: str, *args: str) -> str:
    client = connect(url)
    keys = Keys(prefix)
    store = RedisStore(client, keys, session=session, poll_interval=POLL)
    board = RedisBoard(client, keys, session=session, poll_interval=POLL)
    try:
        if command == "watch":
            return json.dumps((await store.watch(args[0], timeout=30)).value)
        if command == "pingpong":
            for i in range(int(args[0])):
                await store.set(f"a{i}", i)
                await store.watch(f"b{i}", timeout=10)
            return "done"
        if command == "claim":
            task_id, agent, go = args
            await store.watch(go, timeout=30)
            try:
                with acting_as(agent):
                    await board.claim(task_id)
            except StoreError as exc:
                return f"error: {exc}"
            return "won"
        if command == "watch-cancel":
            canceled, completed = await asyncio.gather(
                board.watch_canceled(args[0], timeout=30), board.watch_completed(args[0], timeout=30)
            )
            return f"{canceled.status if canceled else None} {completed.status}"
        raise SystemExit(f"board_peer: unknown command {command!r}")
    except StoreError as exc:
        return f"error: {exc}"
    finally:
        await client.aclose()


if __name__ == "__main__":
    print(asyncio.run(main(*sys.argv[1:])), flush=True)
