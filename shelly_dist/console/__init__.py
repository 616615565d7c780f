"""Layer 10 — the console: ``shelly serve``'s control plane (REST and Server-Sent Events) and the
web page it serves, beside the CLI (DESIGN §12).

One face: :func:`build_app` (the aiohttp application over a backend, behind a :class:`Gate`) and
:func:`serve`. The backends are :mod:`.pool` (stateless over the pool's Redis) and :mod:`.local`
(sessions in this process, when no broker is configured); :mod:`.gate` guards every request;
:mod:`.routes` holds the routes; :mod:`.sse` the event streams; ``static/`` the page (plain ES
modules and CSS, no build step).
"""

from shelly_dist.console.app import build_app, serve
from shelly_dist.console.gate import Gate

__all__ = ["Gate", "build_app", "serve"]
