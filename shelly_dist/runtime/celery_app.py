"""The stable import path of the worker's Celery app: ``celery -A shelly_dist.runtime.celery_app``.

Importing it reads the configuration (through the engine's bootstrap, see
:data:`shelly_dist.runtime.celery.app.DEFAULT_BOOTSTRAP`): ``$SHELLY_CONFIG`` or
``.shelly/config.yaml``, with ``$SHELLY_BROKER_URL`` / ``$SHELLY_REDIS_URL`` overriding it.
"""

from shelly_dist.runtime.celery.app import create_worker_app

app = create_worker_app()
celery = app
