"""Agent schedules: ``wakeup: 30s | 5m | 2h`` (idle-based) or a 5-field cron (``0 9 * * 1-5``).

An interval fires each time the agent has been idle that long: its last activity is its status's
``updated_at`` (set when any wake begins and ends, a scheduled one included), so an idle agent with
``wakeup: 2s`` wakes about every 2 s and a mention-driven wake pushes the next one back. A cron
fires at its times (local time, minute resolution), whatever the agent did.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pydantic import BaseModel

from shelly_dist.errors import ConfigError

DEFAULT_WAKEUP_PROMPT = "Scheduled wakeup. Check for any pending work or updates."

_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600}
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
_HORIZON_DAYS = 366 * 5


def _field(text: str, name: str, low: int, high: int, spec: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ConfigError(f"workflow: wakeup {spec!r}: bad step in {name} field {text!r}")
        if body == "*":
            start, end = low, high
        elif re.fullmatch(r"\d+-\d+", body):
            start, end = (int(x) for x in body.split("-"))
        elif body.isdigit():
            start = end = int(body)
            if step:
                end = high
        else:
            raise ConfigError(f"workflow: wakeup {spec!r}: bad {name} field {text!r}")
        if not (low <= start <= end <= high):
            raise ConfigError(f"workflow: wakeup {spec!r}: {name} field {text!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step or 1))
    return frozenset(values)


class Schedule(BaseModel):
    """When an agent wakes by itself, and what it is told."""

    every: float = 0.0
    """Seconds of idleness (interval schedules)."""
    cron: str = ""
    prompt: str = DEFAULT_WAKEUP_PROMPT

    def next_due(self, now: float, last_activity: float) -> float:
        """When it should next fire, seen at ``now`` (an interval: idle long enough since ``last_activity``)."""
        if self.every:
            return max(last_activity, 0.0) + self.every if last_activity else now + self.every
        return cron_next(self.cron, now)


MIN_WAKEUP = 1.0
"""The shortest interval ``wakeup`` takes, in seconds (``0.001s`` was accepted and woke an agent a
thousand times a second; issue 38)."""


def parse_wakeup(spec: str, prompt: str = "") -> Schedule:
    """A ``wakeup`` value as a :class:`Schedule`; an invalid one is a ``ConfigError`` naming it."""
    prompt = prompt or DEFAULT_WAKEUP_PROMPT
    if m := _INTERVAL.match(spec):
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
        if seconds < MIN_WAKEUP:
            raise ConfigError(f"workflow: wakeup {spec!r} is shorter than {MIN_WAKEUP:g}s: an agent woken that "
                              "often spends the wake budget in seconds; use an interval of 1s or more")
        return Schedule(every=seconds, prompt=prompt)
    cron_fields(spec)
    return Schedule(cron=spec.strip(), prompt=prompt)


def cron_fields(spec: str) -> list[frozenset[int]]:
    parts = spec.split()
    if len(parts) != 5:
        raise ConfigError(f"workflow: wakeup {spec!r} is neither an interval (30s, 5m, 2h) nor a 5-field cron")
    fields = [_field(text, name, low, high, spec) for text, (name, low, high) in zip(parts, _FIELDS, strict=True)]
    if 7 in fields[4]:
        fields[4] = fields[4] | {0}
    return fields


def cron_next(spec: str, after: float) -> float:
    """The first cron time strictly after ``after`` (epoch seconds, local time)."""
    minutes, hours, days, months, weekdays = cron_fields(spec)
    restricted_day, restricted_weekday = spec.split()[2] != "*", spec.split()[4] != "*"
    t = datetime.fromtimestamp(after).replace(second=0, microsecond=0) + timedelta(minutes=1)
    end = t + timedelta(days=_HORIZON_DAYS)
    while t < end:
        day_ok = t.day in days
        weekday_ok = (t.isoweekday() % 7) in weekdays
        # cron: when both day fields are restricted, either matches
        matches_day = (day_ok or weekday_ok) if restricted_day and restricted_weekday else (day_ok and weekday_ok)
        if t.month not in months or not matches_day:
            t = (t + timedelta(days=1)).replace(hour=0, minute=0)
            continue
        if t.hour not in hours:
            t = (t + timedelta(hours=1)).replace(minute=0)
            continue
        if t.minute in minutes:
            return t.timestamp()
        t += timedelta(minutes=1)
    raise ConfigError(f"workflow: wakeup {spec!r} never fires")
