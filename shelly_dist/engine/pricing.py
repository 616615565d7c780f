"""The price table of an engine: the built-in defaults, then Go Shelly's per-user override file
``.shelly/local/pricing.yaml`` (read only, never written), then the config's ``pricing:`` list.

Later sources replace earlier entries with the same provider kind and model prefix, and add the
others. The config comes last because it is the file every process of a deployment shares (and
whose fingerprint workers compare), while ``local/`` belongs to one machine.
"""

from __future__ import annotations

import logging

import yaml

from shelly_dist.engine.config_models import Config
from shelly_dist.engine.shellydir import ShellyDir
from shelly_dist.errors import ConfigError
from shelly_dist.models.pricing import PriceEntry, PriceTable, parse_entries

log = logging.getLogger(__name__)


def local_entries(sd: ShellyDir) -> list[PriceEntry]:
    """The entries of ``.shelly/local/pricing.yaml`` (none when the file is absent).

    Raises ``ConfigError`` naming the file for bad YAML or a bad entry."""
    path = sd.pricing
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}", field=str(path)) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}", field=str(path)) from exc
    entries = parse_entries(data, str(path))
    log.debug("pricing: %d entries from %s", len(entries), path)
    return entries


def load_prices(config: Config, sd: ShellyDir) -> PriceTable:
    """The engine's table: defaults, then ``local/pricing.yaml``, then ``config.pricing``."""
    return PriceTable.default(local_entries(sd), config.pricing)
