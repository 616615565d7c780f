"""One object per Redis client: made once, kept no longer than the client."""

from __future__ import annotations

import gc
import weakref

from shelly_dist.redisio.per_client import PerClient


class Client:
    """Stands for a Redis client (anything weakly referenceable)."""


def test_a_client_gets_the_same_object_every_time() -> None:
    per = PerClient(lambda client: object())
    client = Client()
    assert per(client) is per(client)


def test_two_clients_get_an_object_each() -> None:
    per = PerClient(lambda client: object())
    assert per(Client()) is not per(Client())


def test_the_object_is_not_kept_once_its_client_is_gone() -> None:
    class Made:
        pass

    per = PerClient(lambda client: Made())
    client = Client()
    made = weakref.ref(per(client))
    del client
    gc.collect()
    assert made() is None
