"""How fast a model answered, in the server's own numbers where it gives them.

llama.cpp's ``llama-server`` adds ``timings`` to every answer (``prompt_per_second``,
``predicted_per_second``: its own clock, the prompt's evaluation and the generation apart).
Other servers give only usage (vLLM, the hosted APIs); there the speed is the output tokens over
the call's wall time as measured here, which includes the network and the queue. Either way it is
recorded on the reply (``metadata["speed"]``), carried by the ``message_added`` event, shown in
the live view (``42 tok/s``) and observed by Prometheus.
"""

from __future__ import annotations

from typing import Any

from shelly_dist.models.usage import Usage

SPEED = "speed"
"""The reply metadata key: ``{tokens_per_second, prompt_tokens_per_second?, source}``."""


def server_speed(data: Any, usage: Usage, seconds: float) -> dict[str, Any] | None:
    """The speed of one answer: llama.cpp's ``timings`` when present, else output tokens per
    second of wall time; ``None`` when neither says anything."""
    timings = data.get("timings") if isinstance(data, dict) else None
    if isinstance(timings, dict) and isinstance(timings.get("predicted_per_second"), int | float):
        speed: dict[str, Any] = {"tokens_per_second": round(float(timings["predicted_per_second"]), 1),
                                 "source": "server"}
        if isinstance(timings.get("prompt_per_second"), int | float):
            speed["prompt_tokens_per_second"] = round(float(timings["prompt_per_second"]), 1)
        return speed
    if usage.output_tokens > 0 and seconds > 0:
        return {"tokens_per_second": round(usage.output_tokens / seconds, 1), "source": "measured"}
    return None
