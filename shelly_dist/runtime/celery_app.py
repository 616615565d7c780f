"""The stable import path of the worker's Celery app: ``celery -A shelly_dist.runtime.celery_app``.

Importing it reads the configuration (through the engine's bootstrap, see
:data:`shelly_dist.runtime.celery.worker.tasks.DEFAULT_BOOTSTRAP`): ``$SHELLY_CONFIG`` or
``.shelly/config.yaml``, with ``$SHELLY_BROKER_URL`` / ``$SHELLY_REDIS_URL`` overriding it.
Celery would print a config error at import as a traceback; it is one ``shelly: …`` line here, exit 2
(1 for another shelly error), and its advice names ``SHELLY_CONFIG``, since ``celery`` has no
``--config``.
"""

import sys

from shelly_dist.errors import ConfigError, ShellyError, UsageError
from shelly_dist.runtime.celery.worker.tasks import create_worker_app

PASS_CONFIG = "or pass --config"
"""How ``shelly`` commands' advice ends (``engine.config.find_config``); celery has no such option."""
CELERY_ADVICE = "or set SHELLY_CONFIG=path/to/config.yaml"


def _create() -> object:
    try:
        return create_worker_app()
    except ShellyError as exc:
        sys.stderr.write(f"shelly: {str(exc).replace(PASS_CONFIG, CELERY_ADVICE)}\n")
        raise SystemExit(2 if isinstance(exc, ConfigError | UsageError) else 1) from None


app = _create()
celery = app
