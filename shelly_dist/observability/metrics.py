"""A worker's Prometheus metrics: what its runs, model calls, tools and leases do.

Every layer records with one call into the process-wide metrics below; ``shelly worker
--metrics-port`` serves them (:func:`serve`). Recording without a server costs a counter
increment, so the embedded runtime records too and nobody reads it.

Labels are bounded (DESIGN §9): an agent's config name (never an instance name or a run id), a
provider's config name and its model, a tool's name, an outcome from a short fixed list. A run's
or a session's id is never a label: a pool runs millions of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from shelly_dist.events import TOOL_CALL_END, Event, EventSink

ENV_PORT = "SHELLY_METRICS_PORT"

LOOP_LAG_INTERVAL = 1.0
"""Seconds between two probes of the event loop's lag."""

MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
"""Model calls take from tens of milliseconds (a cache hit, a small model) to minutes."""

RUNS_STARTED = Counter("shelly_runs_started_total", "Runs started on this worker (resumes not counted).",
                       ["agent"])
RUNS_FINISHED = Counter("shelly_runs_finished_total",
                        "Runs ended on this worker, by outcome (done, failed, canceled).", ["agent", "outcome"])
STEPS = Counter("shelly_steps_total", "Steps (a model call and its tools) advanced on this worker.", ["agent"])
RUNS_IN_FLIGHT = Gauge("shelly_runs_in_flight", "Runs this worker holds a lease on now.")
MODEL_CALL_SECONDS = Histogram("shelly_model_call_duration_seconds",
                               "Model calls (their retries included), by provider and model.",
                               ["provider", "model"], buckets=MODEL_BUCKETS)
MODEL_CALL_ERRORS = Counter("shelly_model_call_errors_total", "Model calls that failed after their retries.",
                            ["provider", "model"])
MODEL_TOKENS = Counter("shelly_model_tokens_total",
                       "Tokens of model calls, by kind (input, output, cache_read, cache_creation).",
                       ["provider", "model", "kind"])
MODEL_COST = Counter("shelly_model_cost_usd_total", "USD of model calls at the price table.",
                     ["provider", "model"])
MODEL_SPEED = Histogram("shelly_model_output_tokens_per_second",
                        "Generation speed of model calls: the server's own figure where it gives one (llama.cpp's "
                        "timings), else output tokens over the call's wall time.", ["provider", "model"],
                        buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000))
TOOL_CALLS = Counter("shelly_tool_calls_total", "Tool calls ended, by outcome (ok, error).", ["tool", "outcome"])
LEASES_RENEWED = Counter("shelly_leases_renewed_total", "Lease renewals Redis accepted.")
LEASES_LOST = Counter("shelly_leases_lost_total", "Leases lost (held elsewhere, or not renewed in time).")
TASKS_SENT = Counter("shelly_tasks_sent_total",
                     "Run tasks this process sent to the broker, by path (redis: the direct LPUSH of "
                     "runtime/celery/fast_send.py; kombu: Celery's send_task, for other brokers and team wakes) and "
                     "outcome (taken, refused).",
                     ["path", "outcome"])
RUNS_REAPED = Counter("shelly_runs_reaped_total", "Runs past their deadline this worker's reaper re-enqueued.")
LOOP_LAG = Gauge("shelly_event_loop_lag_seconds",
                 f"How late the worker's event loop ran a callback due {LOOP_LAG_INTERVAL:g}s after the last.")

GOVERNOR_BUCKETS = (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0)
"""A grant is immediate, a pacing interval away (a second or two), or a minute's window away."""

GOVERNOR_WAIT = Histogram("shelly_governor_wait_seconds",
                          "Seconds model calls waited in this process for their key's budget before being granted "
                          "(a wait that suspended its run counts from the call's last attempt).",
                          ["provider", "model", "priority"], buckets=GOVERNOR_BUCKETS)
GOVERNOR_GRANTS = Counter("shelly_governor_grants_total", "Model calls the provider governor granted.",
                          ["provider", "model", "priority"])
GOVERNOR_SUSPENDED = Counter("shelly_governor_suspended_total",
                             "Model calls whose run suspended to wait for its key's budget, by the limit short.",
                             ["provider", "model", "limit"])
GOVERNOR_REJECTED = Counter("shelly_provider_rate_limited_total",
                            "Rate-limit answers received (429, or an overload with retry-after); each pauses the "
                            "key for every process.", ["provider", "model", "status"])
GOVERNOR_LEARNED = Gauge("shelly_governor_learned_limit",
                         "A key's limits as its vendor's headers last said (rpm, input_tpm, output_tpm).",
                         ["provider", "model", "limit"])
AGENT_COST = Counter("shelly_agent_cost_usd_total", "USD of the model calls of each agent (config name).",
                     ["agent"])
AGENT_TOKENS = Counter("shelly_agent_tokens_total", "Tokens of each agent's model calls (input + output + cache).",
                       ["agent"])
DECISION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
"""A person answers in seconds when watching, in hours when not."""
DECISIONS_PENDING = Gauge("shelly_decisions_pending",
                          "Decisions waiting for a person across the pool (the decision index), by kind "
                          "(question, approval); set by the worker that scans shard 0 of the due index.", ["kind"])
DECISION_SECONDS = Histogram("shelly_decision_latency_seconds",
                             "From a decision's request to its answer reaching the run, by kind (question, "
                             "approval).", ["kind"], buckets=DECISION_BUCKETS)
INTERVENTIONS = Counter("shelly_interventions_total",
                        "People's interventions reaching runs, by kind (approval, question, steer); per 1,000 "
                        "runs: 1000 * rate(shelly_interventions_total) / rate(shelly_runs_started_total).",
                        ["kind"])
BATCH_REQUESTS_WAITING = Gauge("shelly_provider_batch_requests_pending",
                               "Model calls waiting on a provider batch, by provider and where (window: not sent "
                               "yet; sent: in a vendor batch), as the desk's holder last saw them.",
                               ["provider", "where"])
BATCHES = Gauge("shelly_provider_batches", "Vendor batches of a provider by step (sending, polling, delivering), "
                "as the desk's holder last saw them.", ["provider", "status"])
BATCH_FALLBACKS = Counter("shelly_provider_batch_fallbacks_total",
                          "Model calls meant for a provider batch made directly instead, by reason.",
                          ["provider", "reason"])

TOKEN_KINDS = ("input", "output", "cache_read", "cache_creation")

NOT_A_PERSON = frozenset({"timeout", "always", "nobody"})
"""Who decided, when it was no person: a deadline, a sticky ``--always``, no answer channel."""


def decided(kind: str, asked: float, *, by: str = "") -> None:
    """A decision of ``kind`` asked at ``asked`` (epoch seconds; 0: unknown) reached its run: its
    latency, and an intervention unless no person made it (:data:`NOT_A_PERSON`)."""
    if asked:
        DECISION_SECONDS.labels(kind).observe(max(0.0, time.time() - asked))
    if by not in NOT_A_PERSON:
        INTERVENTIONS.labels(kind).inc()


@contextlib.contextmanager
def model_call(provider: str, model: str) -> Iterator[None]:
    """Time one model call; a call that raises is counted as an error, but for a control signal
    (``control_signal``: a call suspended until later, ``SuspendModel``), which sent nothing."""
    start = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        if not getattr(exc, "control_signal", False):
            MODEL_CALL_ERRORS.labels(provider, model).inc()
        raise
    finally:
        MODEL_CALL_SECONDS.labels(provider, model).observe(time.perf_counter() - start)


def model_usage(provider: str, model: str, tokens: dict[str, int], cost_usd: float) -> None:
    """Add one call's tokens (by kind, see :data:`TOKEN_KINDS`) and cost."""
    for kind in TOKEN_KINDS:
        if n := tokens.get(kind, 0):
            MODEL_TOKENS.labels(provider, model, kind).inc(n)
    if cost_usd:
        MODEL_COST.labels(provider, model).inc(cost_usd)


def governor_granted(provider: str, model: str, priority: str, waited: float) -> None:
    GOVERNOR_GRANTS.labels(provider, model, priority).inc()
    GOVERNOR_WAIT.labels(provider, model, priority).observe(waited)


def governor_suspended(provider: str, model: str, limit: str) -> None:
    GOVERNOR_SUSPENDED.labels(provider, model, limit or "queue").inc()


def governor_rejected(provider: str, model: str, status: int) -> None:
    GOVERNOR_REJECTED.labels(provider, model, str(status)).inc()


def governor_learned(provider: str, model: str, limits: dict[str, int]) -> None:
    for name, value in limits.items():
        if value:
            GOVERNOR_LEARNED.labels(provider, model, name).set(value)


def agent_usage(agent: str, tokens: int, cost_usd: float) -> None:
    """One model call of ``agent`` (its config name: bounded)."""
    if tokens:
        AGENT_TOKENS.labels(agent).inc(tokens)
    if cost_usd:
        AGENT_COST.labels(agent).inc(cost_usd)


def model_speed(provider: str, model: str, tokens_per_second: float) -> None:
    """One model call's generation speed (tokens per second)."""
    MODEL_SPEED.labels(provider, model).observe(tokens_per_second)


TOOL_LABELS = 200
"""Distinct tool names a process labels :data:`TOOL_CALLS` with; later ones count as ``other``. The
name is the model's choice (a call to a tool that does not exist still ends as a tool call), so a
hostile or confused model made 2,000 series in one run (issue 38)."""
_tool_labels: set[str] = set()


def tool_call(tool: str, *, is_error: bool) -> None:
    if tool not in _tool_labels:
        if len(_tool_labels) >= TOOL_LABELS or len(tool) > 128:
            tool = "other"
        else:
            _tool_labels.add(tool)
    TOOL_CALLS.labels(tool, "error" if is_error else "ok").inc()


async def watch_loop_lag(interval: float = LOOP_LAG_INTERVAL) -> None:
    """Measure how late this loop wakes a sleeper, every ``interval`` seconds, until cancelled: a
    step doing sync work (a blocking call, a long JSON parse) delays every run of the process."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval
        await asyncio.sleep(interval)
        LOOP_LAG.set(max(0.0, loop.time() - due))


def serve(port: int, host: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``/metrics`` (Prometheus text) on a daemon thread."""
    start_http_server(port, addr=host, registry=registry)


def counting_tools(sink: EventSink) -> EventSink:
    """``sink``, counting the tool calls whose end passes through it (:data:`TOOL_CALLS`)."""

    def observe(event: Event) -> None:
        if event.kind == TOOL_CALL_END:
            tool_call(str(event.data.get("tool", "")), is_error=bool(event.data.get("is_error")))
        sink(event)

    return observe
