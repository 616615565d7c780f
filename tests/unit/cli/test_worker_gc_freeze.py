"""A started worker takes its startup objects out of the cyclic collector's reach (``gc.freeze``)."""

from __future__ import annotations

import gc

from celery.signals import worker_ready

from shelly_dist.cli.worker import freeze_startup_objects


def test_the_worker_ready_handler_freezes_every_object_alive_then():
    gc.unfreeze()
    try:
        marker = [object()]
        worker_ready.connect(freeze_startup_objects, weak=False)
        try:
            worker_ready.send(sender=None)
        finally:
            worker_ready.disconnect(freeze_startup_objects)
        assert gc.get_freeze_count() > 0
        assert not gc.is_tracked(marker) or all(o is not marker for o in gc.get_objects())
    finally:
        gc.unfreeze()
