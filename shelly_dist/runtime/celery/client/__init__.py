"""The client room: what a process that uses the pool runs (``shelly run``, ``batch``,
``doctor``, ``events``).

``coordinator`` (:class:`CeleryRuntime`: a top-level run in this process, root runs submitted,
waited for, answered and cancelled), ``tail`` (the live view's feed of the remote tree's events),
``events`` (reading a session's stream), ``trees`` (reading a session's run trees: ``shelly runs``,
the console), ``root_answerer`` (``ask_user`` of the roots this process drives), ``tree_end``
(waiting until a tree has ended), ``workers`` (who is on the pool). It
stands on the children, the broker and the journal, and never on the worker.
"""

from shelly_dist.runtime.celery.client.coordinator import CeleryRuntime, open_runtime

__all__ = ["CeleryRuntime", "open_runtime"]
