"""The children room: what happens to a delegation's children on the pool, whoever their parent
runs in (a worker's run or a coordinator's root).

``dispatch`` (register and send them), ``join`` (a child's end joins its parent, the last one
resumes it), ``spawns`` (``spawn``'s detached children), ``handoff``, ``stops`` (the one stop of a
subtree every stopper calls), ``cancel`` (a whole tree's cancel and ``CancelWatch``), ``questions``
(``ask_user``), ``interactive`` and ``round_timeout`` (interactive delegation and its
``question_timeout``), ``wakes`` (team wakes as root runs), ``policy`` (``max_concurrency`` slots,
fail-fast), ``model_waits`` (a suspended model call's reply joined into its run), ``batch_layer`` and
``batch_desk`` (a run's model call joined into its provider key's batch desk). It stands on the
journal and the broker; the worker and the client stand on it.
"""

from shelly_dist.runtime.celery.children.cancel import CancelWatch, cancel_session, cancel_tree
from shelly_dist.runtime.celery.children.dispatch import dispatch_children
from shelly_dist.runtime.celery.children.join import enqueue_resume, finish_and_join, resume_each

__all__ = [
    "CancelWatch",
    "cancel_session",
    "cancel_tree",
    "dispatch_children",
    "enqueue_resume",
    "finish_and_join",
    "resume_each",
]
