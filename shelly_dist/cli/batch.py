"""``shelly batch``: many tasks from JSONL, each in its own session, N at a time, in-process.

Shelly's schemas: input lines ``{"id","agent"?,"task","context"?}``, output lines
``{"id","agent","status":"completed|error","reply"?,"error"?,"elapsed"}`` (and ``run`` on a pool),
plus ``usage``: what the item's whole tree spent (tokens by kind, ``cost_usd``,
``model_requests``). The batch ends with one line on stderr totalling the items it ran and what
they spent.
The output is appended one line per finished item (in one write), so an interrupted batch keeps
what it finished, and a re-run skips every id already in the output: the output file is the
batch's journal (:mod:`shelly_dist.cli.batch_files`). A failing item is an ``error`` line, never
the end of the batch; a bad input line is reported with its line number on stderr and skipped;
duplicate ids are an error before anything runs. On a pool, Redis and the broker are checked
before the first item is submitted (a failure is one ``shelly:`` line); an item that meets Redis or
the broker failing later is not recorded (a rerun runs it) and the batch ends with one line naming
how many and why. The exit code is 1 when any item failed or was not run, or any line was bad.
Batch sessions are not saved under ``.shelly/local/sessions`` (a batch would flood it).

Ctrl-C stops the batch with exit code 130: in-process items are cancelled with it, and on a worker
pool every run the batch was waiting for is cancelled (its whole tree). On a pool, the item id is
the run's idempotency key, so a rerun continues the runs of an interrupted batch instead of
submitting them again (:mod:`shelly_dist.cli.batch_pool` says what happens to each state).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shelly_dist.chats import Message
from shelly_dist.chats.attachments import attachment
from shelly_dist.cli.batch_files import BatchItem, append_record, done_ids, read_items
from shelly_dist.cli.batch_pool import ItemFailed, PoolItems, batch_identity
from shelly_dist.cli.errors import EXIT_FAILED, run_async
from shelly_dist.cli.explain import explain
from shelly_dist.cli.options import config_options
from shelly_dist.engine import Engine
from shelly_dist.engine.config import find_config, load_config
from shelly_dist.engine.providers import with_provider_batches
from shelly_dist.engine.session import user_messages
from shelly_dist.errors import RunError, RunNotFound, StoreError
from shelly_dist.identity import acting_as
from shelly_dist.models import Usage
from shelly_dist.tools.builtin.ask import NoAnswerer

__all__ = ["BatchItem", "ItemNotRun", "batch_command", "done_ids", "item_messages", "read_items", "run_batch",
           "run_item"]


class ItemNotRun(Exception):
    """An item met a failure of the infrastructure (Redis, the broker), not of its run: it is not
    recorded as its result, so a rerun runs it."""

    def __init__(self, item_id: str, cause: str) -> None:
        super().__init__(f"item {item_id!r}: {cause}")
        self.item_id = item_id
        self.cause = cause


def _infrastructure(exc: BaseException) -> str | None:
    """The one-line cause when ``exc`` is Redis or the broker failing (not the item's run), or
    the item's run vanishing from Redis however often it was submitted again (``PoolItems.run``)."""
    explained = explain(exc)
    if explained is not None:
        return explained[1]
    if isinstance(exc, RunNotFound):
        return f"{exc}: gone from Redis (restarted without persistence?) after each submission"
    return str(exc) if isinstance(exc, StoreError) else None


def item_messages(item: BatchItem) -> list[Message]:
    """The item's user messages: its context (when any), then its task with its attachments, read
    here, once (blocking; a file that cannot be attached is a ``UsageError``, the item's error)."""
    return user_messages(item.task, item.context, [attachment(path) for path in item.attachments])


async def run_item(engine: Engine, item: BatchItem, pool: PoolItems | None = None) -> dict[str, Any]:
    """Run one item in a fresh session; never raises but cancellation and :class:`ItemNotRun`.

    With ``pool`` (the distributed runtime) the item is a root run on the worker pool, named after
    the item (this process only submits it and waits for its record); otherwise it runs here.
    """
    started = time.monotonic()
    record: dict[str, Any] = {"id": item.id, "agent": item.agent or engine.config.entry().name}
    try:
        agent = engine.agent_name(item.agent or None)
        record["agent"] = agent
        messages = await asyncio.to_thread(item_messages, item) if item.attachments else item_messages(item)
        if pool is not None:
            record.update(await pool.run(agent, item.id, messages))
        else:
            session = engine.session(agent=agent, persist=False)
            try:
                outcome = await session.send_messages(messages)
            finally:  # the item's session ends with it: a long batch must not keep every one
                engine.discard_session(session.id)
            record.update(status="completed", reply=outcome.reply.text_content(),
                          usage=(outcome.tree_usage or outcome.usage).model_dump())
    except Exception as exc:  # a failing item never stops the batch
        cause = _infrastructure(exc)
        if cause is not None:
            raise ItemNotRun(item.id, cause) from exc
        record.update(status="error", error=str(exc) or type(exc).__name__)
        if isinstance(exc, ItemFailed):
            record["usage"] = exc.usage
    record["elapsed"] = round(time.monotonic() - started, 3)
    return record


class Totals:
    """What the items a batch ran spent, summed as their output lines are written."""

    def __init__(self, unread: int = 0) -> None:
        self.items = 0
        self.failed = 0
        self.unread = unread
        """Lines of the input that were not an item (bad JSON, a missing field): never run."""
        self.usage = Usage()

    def add(self, record: dict[str, Any]) -> None:
        self.items += 1
        self.failed += record["status"] != "completed"
        if record.get("usage"):
            self.usage = self.usage + Usage.model_validate(record["usage"])

    def line(self) -> str:
        """The batch's last line on stderr: ``batch: 80 items (2 failed), 12,345 tokens, $0.0123,
        160 model requests`` (and ``, 1 input line not read`` when the input had bad lines)."""
        u = self.usage
        failed = f" ({self.failed} failed)" if self.failed else ""
        unread = (f", {self.unread} input line{'s' if self.unread != 1 else ''} not read (see above)"
                  if self.unread else "")
        return (f"batch: {self.items} items{failed}{unread}, {u.total_tokens:,} tokens "
                f"({u.input_tokens:,} in, {u.output_tokens:,} out, "
                f"{u.cache_read_tokens + u.cache_creation_tokens:,} cache), ${u.cost_usd:.4f}, "
                f"{u.model_requests:,} model requests")


async def run_batch(
    engine: Engine,
    items: list[BatchItem],
    output: Path,
    *,
    concurrency: int,
    progress: Progress | None = None,
    pool: PoolItems | None = None,
    totals: Totals | None = None,
) -> int:
    """Run ``items``, ``concurrency`` at a time, appending each record to ``output``; the number
    of items that failed (``totals``, when given, sums what every recorded item spent). Cancelled
    (Ctrl-C), it cancels every pool run it was waiting for. Items that met an infrastructure
    failure are not recorded: at the end, one ``RunError`` names how many and the first cause (a
    rerun runs them)."""
    failed = 0
    totals = totals if totals is not None else Totals()
    not_run: list[ItemNotRun] = []
    task_id = progress.add_task("batch", total=len(items)) if progress is not None else None
    queue = iter(items)

    async def runner() -> None:
        """Take the next item until none is left: ``concurrency`` of these run at once, so the
        batch holds that many items in flight, never one task per item (10,000 items, issue 27)."""
        nonlocal failed
        for item in queue:
            try:
                record = await run_item(engine, item, pool)
            except ItemNotRun as exc:
                not_run.append(exc)
                continue
            failed += record["status"] != "completed"
            totals.add(record)
            await asyncio.to_thread(append_record, output, record)
            if progress is not None and task_id is not None:
                progress.advance(task_id)

    try:
        await asyncio.gather(*(runner() for _ in range(min(concurrency, len(items)))))
    except asyncio.CancelledError:
        if pool is not None:
            await asyncio.shield(pool.cancel_all())
        raise
    if not_run:
        raise RunError(f"batch: {len(not_run)} of {len(items)} items not run: {not_run[0].cause} "
                       f"(nothing was recorded for them; a rerun runs them)")
    return failed


@click.command("batch")
@click.option("--tasks", "tasks_path", required=True, type=click.Path(dir_okay=False), help="Input JSONL.")
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False), help="Output JSONL.")
@click.option("--concurrency", default=None, type=click.IntRange(min=1),
              help="Items in flight at a time (default 8 in-process, 64 on a worker pool).")
@config_options
@click.option("--batch-id", default=None,
              help="On a worker pool, the batch's identity: a rerun with the same id continues its runs "
                   "instead of submitting them again (default: derived from the output file's path).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--priority", type=click.Choice(["batch", "interactive"]), default="batch", show_default=True,
              help="The items' priority at their providers: batch work waits for interactive work (shelly run) "
                   "when a key is saturated, and batches share a key fairly.")
@click.option("--label", default=None,
              help="Who the items' trees are at their providers: batches of one label share keys fairly as one, "
                   "and the config's spend: limits of the label hold for them (default: this batch alone).")
@click.option("--provider-batch", is_flag=True,
              help="Send every model call through its provider's batch API (OpenAI Batch, Anthropic Message "
                   "Batches: half price, replies within 24 h) as if each provider with one set batch.enabled.")
def batch_command(
    tasks_path: str,
    output_path: str,
    concurrency: int | None,
    config_path: str | None,
    shelly_dir: str,
    batch_id: str | None,
    quiet: bool,
    priority: str,
    label: str | None,
    provider_batch: bool,
) -> None:
    """Run every task of a JSONL file, each in its own session, writing one line per result."""
    console = Console(stderr=True)
    output = Path(output_path)
    ident = batch_id or batch_identity(output)
    with acting_as(priority=priority, share=label or f"batch-{ident}"):  # every item's tree, on any process
        failed = run_async(_main(Path(tasks_path), output, concurrency, config_path, shelly_dir, quiet, console,
                                 ident, provider_batch))
    if failed:
        raise SystemExit(EXIT_FAILED)


async def _main(
    tasks: Path,
    output: Path,
    concurrency: int | None,
    config_path: str | None,
    shelly_dir: str,
    quiet: bool,
    console: Console,
    batch_id: str,
    provider_batch: bool = False,
) -> int:
    try:
        items, problems = await asyncio.to_thread(read_items, tasks)
    except OSError as exc:
        raise click.UsageError(f"batch: cannot read {tasks}: {exc.strerror or exc}") from exc
    for problem in problems:
        console.print(f"batch: {tasks}: {problem}", markup=False, highlight=False)
    skip, repaired = await asyncio.to_thread(done_ids, output)
    if repaired:
        console.print(f"batch: {output}: {repaired}", markup=False, highlight=False)
    todo = [i for i in items if i.id not in skip]
    if skip & {i.id for i in items}:
        console.print(f"batch: skipping {len(items) - len(todo)} items already in {output}", markup=False)
    config = await asyncio.to_thread(load_config, find_config(config_path, shelly_dir))
    if provider_batch:
        if not any(p.batch_api(force=True) for p in config.providers):
            console.print("batch: --provider-batch: no provider has a batch API (kind openai at OpenAI, anthropic, "
                          "or batch.api set): every model call goes direct", markup=False, highlight=False)
        if not config.distributed.broker_url:  # on a pool each item's session says it (the workers' config,
            config = with_provider_batches(config)  # and its fingerprint, stay the deployment's)
    async with await Engine.open(config, shelly_dir=shelly_dir, answerer=NoAnswerer()) as engine:
        pool = (PoolItems(engine.runtime, batch_id, provider_batch=provider_batch)  # type: ignore[arg-type]
                if hasattr(engine.runtime, "submit") else None)
        if pool is not None and todo:  # Redis and the broker answer, or one line now, before any item
            await pool.runtime.check()
        if concurrency is None:
            concurrency = 64 if pool is not None else 8
        totals = Totals(unread=len(problems))
        try:
            if quiet or not todo:
                failed = await run_batch(engine, todo, output, concurrency=concurrency, pool=pool, totals=totals)
            else:
                columns = (TextColumn("batch"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
                with Progress(*columns, console=console) as progress:
                    failed = await run_batch(engine, todo, output, concurrency=concurrency, progress=progress,
                                             pool=pool, totals=totals)
        finally:  # also when interrupted, or when items were not run: what was recorded was spent
            if todo:
                console.print(totals.line(), markup=False, highlight=False, soft_wrap=True)
    return failed + len(problems)
