"""Files older Shelly versions left in ``.shelly/``, moved to where they live now.

Go Shelly's engine moves a legacy ``.shelly/permissions.json`` into ``.shelly/local/`` at
start-up (``MigratePermissions``: nothing happens when the old file is missing or the new one
exists). Here "local" is the state directory (``SHELLY_STATE_DIR``, else ``.shelly/local`` when
writable, see :func:`~shelly_dist.engine.shellydir.state_dir`), and ``.shelly/`` may be a
read-only mount: then the legacy file is copied, not moved, and stays behind untouched (the next
start finds the new file and does nothing). :func:`permissions_file` is the one place that
decides where the permission store is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from shelly_dist.engine.shellydir import ShellyDir

log = logging.getLogger(__name__)


def permissions_file(sd: ShellyDir) -> Path:
    """Where the permission store of ``sd`` is, after bringing a legacy file there (blocking).

    When the legacy file can be neither moved nor copied (no writable state directory), it is
    read where it is (its flat-array format is still understood) rather than losing its grants.
    """
    old, new = sd.legacy_permissions, sd.permissions
    if not old.is_file() or new.exists():
        return new
    try:
        new.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(old, new)
        except OSError:  # read-only .shelly/, or the state directory on another filesystem
            shutil.copyfile(old, new)
            with contextlib.suppress(OSError):
                old.unlink()
    except OSError as exc:
        log.warning("cannot move %s to %s (%s); reading it in place", old, new, exc)
        return old
    log.info("moved %s to %s", old, new)
    return new
