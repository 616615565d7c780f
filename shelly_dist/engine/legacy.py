"""Files older Shelly versions left in ``.shelly/``, moved to where they live now.

Go Shelly's engine moves a legacy ``.shelly/permissions.json`` into ``.shelly/local/`` at
start-up (``MigratePermissions``: nothing happens when the old file is missing or the new one
exists). :func:`permissions_file` is the one place that decides where the permission store is,
so pointing it at a separate state directory later changes only this function.
"""

from __future__ import annotations

import logging
from pathlib import Path

from shelly_dist.engine.shellydir import ShellyDir, migrate_permissions

log = logging.getLogger(__name__)


def permissions_file(sd: ShellyDir) -> Path:
    """Where the permission store of ``sd`` is, after moving a legacy file there (blocking).

    When ``.shelly/`` is read-only the legacy file cannot move; it is then read where it is
    (its flat-array format is still understood) rather than losing its grants.
    """
    if not sd.exists():
        return sd.permissions
    try:
        if migrate_permissions(sd.root):
            log.info("moved %s to %s", sd.legacy_permissions, sd.permissions)
    except OSError as exc:
        log.warning("cannot move %s into local/ (%s); reading it in place", sd.legacy_permissions, exc)
        return sd.legacy_permissions
    return sd.permissions
