"""Every Redis key and pub/sub channel name shelly-dist uses, in one place.

The key layout of DESIGN.md §3 has exactly one mirror in code: this class. Names that leave the
process are literal templates, never derived from module paths, so moving code never orphans data
already in Redis. Everything per session lives under ``{prefix}s:{session}:`` and everything per
run under ``{prefix}run:{id}``; both carry a retention TTL set by their writers (DESIGN.md §3,
rule 10). Channels are named after the key they announce, with a ``:changed`` suffix.

Hash tags (DESIGN.md §3, rule 14: a clustered Redis routes a key by the text between its first
``{`` and ``}``, and a script or MULTI may only touch keys of one slot):

* a session's keys are tagged by the session: ``shelly:s:{S}:state``, ``…:tasks``, ``…:events``,
  ``…:runs``, ``…:n:<agent>``, ``…:saved`` all share one slot;
* a run tree's keys are tagged by its *tree tag*, the run id up to its first ``-``:
  ``shelly:run:{abc}`` (root ``abc``), ``shelly:run:{abc}-1f2e…:msgs`` (a child). A child's id is
  its parent's id plus ``-<digest>`` (``journal.child_run_id``), so every id of a tree starts with
  the root's tag and a run is found from its id alone (``shelly cancel RUN_ID``, ``shelly runs``)
  without any index. Two trees may share a tag (``b1a2…`` and its rerun ``b1a2…-2``): they
  then share a slot, which is harmless.
* the few global keys (``…:due:scanners``, ``…:generations``, ``…:sessions``, cooldowns) are each
  touched alone, never in a script or transaction with another key;
* the global due index is sharded over a fixed number of tags (``…:due:{d0}`` … ``{d15}``),
  a shard's sorted set and its versions hash sharing one.

A tree and its session are in different slots, so no script touches both: the step's events that
``CHECKPOINT``/``FINISH`` append to the session's stream are passed in ``KEYS`` only on a single
Redis (atomic with the step, as before); on a cluster the journal appends them right after the
script succeeds (see ``Journal``): a holder's events still appear once and in step order, and
only a crash between the two loses that one step's events from the live view (the journal, the
truth, has the step). Braces are therefore not allowed in a prefix, session id or run id.
"""

from __future__ import annotations

from shelly_dist.errors import UsageError

DEFAULT_PREFIX = "shelly:"

DEFAULT_RETENTION = 7 * 24 * 3600
"""Seconds a session's keys outlive their last write: a week, long enough to inspect a finished
batch with ``shelly state``/``shelly tasks``, short enough that Redis does not fill up."""


def _name(kind: str, value: str) -> str:
    if not value or any(c.isspace() or c in "{}" for c in value):
        raise UsageError(f"keys: invalid {kind} {value!r}: must be non-empty without whitespace or braces")
    return value


def tree_tag(run_id: str) -> str:
    """The hash tag shared by every run of a tree: the id up to its first ``-`` (see above)."""
    tag = _name("run id", run_id).split("-", 1)[0]
    if not tag:
        raise UsageError(f"keys: invalid run id {run_id!r}: must not start with '-'")
    return tag


def tagged(run_id: str) -> str:
    """``run_id`` with its tree tag in braces (``{abc}-1f2e…``): how any per-run key names the run,
    so that it lands in its tree's slot."""
    tag = tree_tag(run_id)
    return f"{{{tag}}}{run_id[len(tag):]}"


class Keys:
    """Key and channel templates under one prefix (default ``shelly:``; a missing ``:`` is added)."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        if prefix and not prefix.endswith(":"):
            prefix += ":"
        if "{" in prefix or "}" in prefix:
            raise UsageError(f"keys: invalid prefix {prefix!r}: braces would change the hash tags")
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"Keys({self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keys) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)

    # -- per session -------------------------------------------------------------------------

    def session(self, session: str) -> str:
        """The common prefix of one session's keys (``shelly:s:{session}``, braces included: the
        session is their hash tag)."""
        return f"{self.prefix}s:{{{_name('session', session)}}}"

    def state(self, session: str) -> str:
        """Blackboard hash: field = key, value = entry JSON."""
        return f"{self.session(session)}:state"

    def state_changed(self, session: str) -> str:
        """Channel announcing blackboard writes; the message is the key written."""
        return f"{self.state(session)}:changed"

    def tasks(self, session: str) -> str:
        """Task board hash: field = task id, value = task JSON."""
        return f"{self.session(session)}:tasks"

    def tasks_changed(self, session: str) -> str:
        """Channel announcing task board writes; the message is the task id."""
        return f"{self.tasks(session)}:changed"

    def events(self, session: str) -> str:
        """Event stream of the session (XADD/XREAD)."""
        return f"{self.session(session)}:events"

    def saved_session(self, session: str) -> str:
        """A saved conversation (hash: ``meta``, ``messages``), when sessions live in Redis."""
        return f"{self.session(session)}:saved"

    def write_probe(self) -> str:
        """A key no code ever creates: ``LPUSHX`` on it asks whether Redis takes writes
        (:mod:`shelly_dist.redisio.refusal`) and changes nothing when it does."""
        return f"{self.prefix}write-probe"

    def saved_sessions(self) -> str:
        """Sorted set of saved session ids, scored by their ``updated_at``."""
        return f"{self.prefix}sessions"
    def run_sessions(self) -> str:
        """Sorted set of the sessions that have root runs, scored by when their newest root was
        created: what the console (``shelly serve``) lists, most recent first."""
        return f"{self.prefix}run-sessions"

    def a2a_task(self, session: str) -> str:
        """The A2A task ``shelly a2a serve`` runs as this session (its task id is the session id),
        as protobuf JSON."""
        return f"{self.session(session)}:a2a"

    def a2a_task_owner(self, session: str) -> str:
        """The caller that owns the A2A task of this session (``""``: served without tokens)."""
        return f"{self.session(session)}:a2a-owner"

    def a2a_tasks(self) -> str:
        """Sorted set of the A2A tasks' ids, scored by their last update (``tasks/list``)."""
        return f"{self.prefix}a2a-tasks"

    def reflections(self) -> str:
        """Sorted set of reflection notes of failed children (member = the note, score = when
        written), shared by every session of this prefix."""
        return f"{self.prefix}reflections"

    def offload(self, session: str) -> str:
        """Offloaded tool results of the session: field = tool-call id, value = the result text."""
        return f"{self.session(session)}:offload"

    def workspace(self, session: str, part: str) -> str:
        """A part of the session's team workspace (``shelly_dist/workspace``): ``channel`` (list of
        message JSON, id = position), ``cursors`` (hash: agent → acked id), and one hash per table
        (``members``, ``docs``, ``owners``, ``resources``, ``status``, ``proposals``, ``dead``)."""
        return f"{self.session(session)}:ws:{_name('workspace part', part)}"

    def workspace_wake(self, session: str, agent: str) -> str:
        """Who is running a wake of ``agent`` now (SET NX PX): one wake per agent at a time."""
        return f"{self.session(session)}:ws:wake:{_name('agent', agent)}"

    def team_due(self) -> str:
        """Sorted set of team schedules (member ``session/agent``), scored by when each is next due
        (ms): whoever passes a due time claims it (one script on this key alone) and fires it."""
        return f"{self.prefix}team:due"

    def blob(self, digest: str) -> str:
        """An attachment's base64 bytes by their sha256 (``digest``), stored once for every run
        that carries them (``runtime/celery/journal/blobs.py``); each use renews its expiry."""
        return f"{self.prefix}blob:{digest}"

    # -- per run -----------------------------------------------------------------------------

    def run(self, run_id: str) -> str:
        """Run record hash (agent, depth, parent, root, session, status, step); the id's tree tag
        in braces (``shelly:run:{abc}-1f2e…``)."""
        return f"{self.prefix}run:{tagged(run_id)}"

    def run_msgs(self, run_id: str) -> str:
        """The run's message journal (append-only list)."""
        return f"{self.run(run_id)}:msgs"

    def run_children(self, run_id: str) -> str:
        """The run's children results (join)."""
        return f"{self.run(run_id)}:children"

    def run_changed(self, run_id: str) -> str:
        """Channel announcing changes to the run (finished, cancelled)."""
        return f"{self.run(run_id)}:changed"

    def run_ended(self, run_id: str) -> str:
        """Channel announcing a root run's end (its status, from ``FINISH``): what a process
        waiting for the end listens to, without the joins of the run's children that
        :meth:`run_changed` carries (a message each)."""
        return f"{self.run(run_id)}:ended"

    def run_expected(self, run_id: str) -> str:
        """Set of child keys the run waits for (registered before any child is enqueued)."""
        return f"{self.run(run_id)}:expected"

    def run_lease(self, run_id: str) -> str:
        """Who is advancing the run right now (SET NX PX): one task at a time per run."""
        return f"{self.run(run_id)}:lease"

    def run_received(self, run_id: str) -> str:
        """Which worker holds a task message of the run it has received but not yet claimed (SET
        PX, the lease's length, renewed with the worker's leases): a message a dead worker had
        received is sent again once this lapses, not after the broker's visibility timeout."""
        return f"{self.run(run_id)}:received"

    def tree_runs(self, root_id: str) -> str:
        """Set of every run id in the tree under a root run (for cancel and ``shelly runs``)."""
        return f"{self.run(root_id)}:tree"

    def orphan_sweep(self) -> str:
        """Which worker sweeps the Redis broker's unacknowledged index this round (SET NX PX, the
        sweep interval; ``worker/orphans.py``)."""
        return f"{self.prefix}orphan-sweep"

    def death_pull(self) -> str:
        """Which reaper pulls every tree's backstops in after a worker died holding a run (SET NX
        PX, a lease): one of the pool, at most once a lease (``worker/reaper.py``)."""
        return f"{self.prefix}pull-after-death"

    def tree_deadlines(self, root_id: str) -> str:
        """Sorted set of the tree's runs that someone must advance, scored by the time (ms) by
        which that must show: a lease's expiry, a queued run's or a completed join's re-send time.
        The reaper re-enqueues what passes its deadline (see ``runtime/celery/worker/reaper.py``)."""
        return f"{self.run(root_id)}:deadlines"

    def run_asked(self, run_id: str) -> str:
        """The run's ``ask_user`` questions by answer field (so a repeated step asks nothing twice)."""
        return f"{self.run(run_id)}:asked"

    def tree_questions(self, root_id: str) -> str:
        """The tree's open decisions (``ask_user`` questions, approvals of gated calls): field =
        decision id, value = its JSON (``kind`` says which)."""
        return f"{self.run(root_id)}:questions"

    def tree_questions_due(self, root_id: str) -> str:
        """Sorted set of the tree's open decisions with a deadline (``question_timeout``,
        ``approval.timeout``), scored by it (ms): the reapers time out those past it."""
        return f"{self.run(root_id)}:questions:due"

    def run_steer(self, run_id: str) -> str:
        """The run's steering messages (``shelly steer``), append-only; the run's cursor in it is
        journaled with its state, and the record's ``steer`` field counts them."""
        return f"{self.run(run_id)}:steer"

    def delegations_due(self) -> str:
        """Sorted set of the waits of interactive children on their parent's round, scored by
        their ``question_timeout`` deadline (ms), one member (JSON naming parent, root, key,
        child) per wait: every reaper scan times out those past it (``runtime/celery/children/round_timeout.py``).
        One key for the prefix, as before the due index (its members name trees of every slot,
        so it is never passed to a script)."""
        return f"{self.prefix}delegations:due"

    def due_shard(self, shard: int) -> str:
        """One shard of the global due index: sorted set of root run ids, scored by the time (ms)
        by which something in that tree may be due (at or before its earliest deadline). A hint
        beside the trees' own indexes, so it has a hash tag of its own per shard
        (``shelly:due:{d3}``); see ``runtime/celery/journal/due.py``."""
        return f"{self.prefix}due:{{d{shard}}}"

    def due_versions(self, shard: int) -> str:
        """Hash of the shard's roots: a counter bumped by every hint, so a scanner raises a
        tree's hint only if no writer hinted it meanwhile (same slot as :meth:`due_shard`)."""
        return f"{self.due_shard(shard)}:v"

    def due_scanners(self) -> str:
        """Hash: due-index shard → ``worker|expiry ms``, the scanner elected for each shard."""
        return f"{self.prefix}due:scanners"

    def generations(self) -> str:
        """Sorted set of config fingerprints served by live workers, scored by when last seen."""
        return f"{self.prefix}generations"

    def session_runs(self, session: str) -> str:
        """Sorted set of the session's root runs, scored by creation time."""
        return f"{self.session(session)}:runs"

    def session_questions(self, session: str) -> str:
        """The session's open ``ask_user`` questions: field = question id, value = the root run id
        of the tree that holds it (the question itself is in :meth:`tree_questions`)."""
        return f"{self.session(session)}:question-trees"

    def question_counter(self, session: str) -> str:
        """Counter behind question ids ``q-<n>``, unique across the session's trees."""
        return f"{self.session(session)}:qn"

    def approval_counter(self, session: str) -> str:
        """Counter behind approval ids ``a-<n>``, unique across the session's trees."""
        return f"{self.session(session)}:an"

    def session_batch(self, session: str) -> str:
        """The batch (its identity) whose item runs in ``session``, when one does: what ``--batch``
        filters and where a batch's ``--always`` verdicts are kept."""
        return f"{self.session(session)}:batch"

    def always(self, scope: str) -> str:
        """Sticky verdicts (``--always``) of one scope: field = tool, value = the verdict's JSON.
        ``scope`` is ``s:<session>`` or ``batch:<identity>``; touched alone, never in a script."""
        return f"{self.prefix}always:{_name('scope', scope)}"

    def decisions(self, kind: str) -> str:
        """The index of every open decision of ``kind`` (``question``, ``approval``) across all
        sessions: sorted set of ``<session> <id> <root>`` scored by when it was asked (ms), so
        ``shelly decisions`` costs O(pending), not O(live trees). Touched alone, never in a script."""
        return f"{self.prefix}decisions:{_name('kind', kind)}"

    def instance_counter(self, session: str, agent: str) -> str:
        """Counter behind instance names ``<agent>-<slug>-<n>``, unique across workers."""
        return f"{self.session(session)}:n:{_name('agent', agent)}"

    def agent_slots(self, session: str, agent: str) -> str:
        """Sorted set of the runs holding a ``max_concurrency`` slot of ``agent`` (score: lease
        deadline, ms)."""
        return f"{self.session(session)}:slots:{_name('agent', agent)}"

    def cancel_channel(self) -> str:
        """Channel on which cancelled root run ids are announced to every worker."""
        return f"{self.prefix}cancel"

    def budget(self, scope: str, outer: str | None = None) -> str:
        """Tree-limits totals of one scope (the id of the run that opened it): used and reserved.

        Tagged by the call's outermost scope ``outer`` (default: ``scope`` itself), so every scope
        one reservation touches shares a slot: scopes are inherited down a tree as a list that only
        grows at its end, so every call touching a scope starts its list with the same outermost
        one. (Run ids alone would not do: an embedded child's id does not extend its parent's.)"""
        outer = _name("scope", outer or scope)
        tail = "" if scope == outer else f":{_name('scope', scope)}"
        return f"{self.prefix}budget:{{{outer}}}{tail}"

    def governor(self, unit: str, part: str) -> str:
        """One part of a provider key's governor account (``log``, ``tokens``, ``state``,
        ``flying``, ``queue``, ``due``, ``share:<who>``), every part in the unit's slot."""
        return f"{self.prefix}gov:{{{_name('governed unit', unit)}}}:{part}"

    def spend(self, scope: str, period: str) -> str:
        """USD a spend scope (a provider key, a label) spent in one period (``d20261128``,
        ``m202611``); every scope under one tag, so a call's reservation is one script."""
        return f"{self.prefix}spend:{{spend}}:{_name('spend scope', scope)}:{period}"

    def cooldown(self, name: str) -> str:
        """Provider cooldown record (shared by every worker)."""
        return f"{self.prefix}cooldown:{_name('cooldown', name)}"


    # -- provider batches (runtime/celery/children/batch_desk.py) -------------------------------

    def batch(self, desk: str, part: str) -> str:
        """One part of a provider key's batch desk (``window``, ``requests``, ``lines``, ``flushes``,
        ``polls``, ``lock``): every part of one desk shares its hash tag, so one script touches them."""
        return f"{self.prefix}bk:{{{_name('batch desk', desk)}}}:{part}"

    def batch_desks(self) -> str:
        """Sorted set of the batch desks with work, scored by when it is next due (ms): the pollers
        read what is due, never every waiting request (DESIGN §3 rule 17)."""
        return f"{self.prefix}bk:due"

    def session_meta(self, session: str) -> str:
        """Hash of a session's own settings (``provider_batch``: its runs' model calls go through
        provider batches, ``shelly batch --provider-batch``)."""
        return f"{self.session(session)}:meta"
