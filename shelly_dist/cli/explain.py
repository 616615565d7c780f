"""First-hour failures in one line: what went wrong below shelly, and what to do about it.

A missing module, a Redis that refuses the connection or the password, a broker that cannot be
reached, a read-only or missing directory: these reach the CLI wrapped (a ``StoreError`` whose
cause is redis-py's ``ConnectionError``, kombu's ``OperationalError`` around a socket error), and
their own messages name neither the setting nor the fix. :func:`explain` walks the exception's
cause chain and returns the exit code and a line that names both. Library classes are recognised
by module and name, so this module imports neither redis, kombu nor amqp (the embedded path never
loads them).
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator

from shelly_dist.errors import ShellyError

EXIT_FAILED = 1
"""The run failed (here: a service could not be reached)."""
EXIT_USAGE = 2
"""Bad usage or config (here: something the user must install, configure or make writable)."""

REDIS_FIX = "start Redis, or fix distributed.redis_url (or SHELLY_REDIS_URL)"
BROKER_FIX = "start the broker, or fix distributed.broker_url (or SHELLY_BROKER_URL)"
REDIS_AUTH_FIX = ("put the password in the Redis URL, redis://:PASSWORD@host:6379/0, of distributed.redis_url "
                  "(or SHELLY_REDIS_URL) and of a Redis distributed.broker_url")
BROKER_AUTH_FIX = "put user and password in distributed.broker_url: amqp://USER:PASSWORD@host// (or SHELLY_BROKER_URL)"
STATE_FIX = "set SHELLY_STATE_DIR to a writable directory"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then its causes and contexts, each once."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
        todo += [c for c in getattr(e, "exceptions", ()) if isinstance(c, BaseException)]


def _is(exc: BaseException, module: str, *names: str) -> bool:
    """Whether ``exc`` is an instance of a class ``module.<name>`` (module prefix match)."""
    return any(c.__module__.startswith(module) and c.__name__ in names for c in type(exc).__mro__)


def _where(message: str) -> str:
    """``host:port`` named in a client's error message, else an empty string."""
    found = re.search(r"connecting to ([\w.\-\[\]:]+?:\d+)", message) or re.search(r"([\w.\-]+:\d{2,5})", message)
    return f" at {found.group(1)}" if found else ""


def _auth(e: BaseException) -> tuple[int, str] | None:
    text = str(e)
    if _is(e, "redis", "AuthenticationError", "AuthenticationWrongNumberOfArgsError") or (
        _is(e, "redis", "ResponseError") and re.match(r"(NOAUTH|WRONGPASS)", text)
    ):
        missing = re.search(r"NOAUTH|Authentication required|already authenticated", text)
        cause = "requires a password and none was given" if missing else "refused the password"
        return EXIT_USAGE, f"Redis{_where(text)} {cause}: {REDIS_AUTH_FIX}"
    if _is(e, "amqp", "AccessRefused") or "ACCESS_REFUSED" in text:
        return EXIT_USAGE, f"the broker refused the user or password: {BROKER_AUTH_FIX}"
    return None


def _redis(e: BaseException) -> tuple[int, str] | None:
    text = str(e)
    if _is(e, "redis", "BusyLoadingError"):  # a ConnectionError too, but Redis is up: reading its data back
        return EXIT_FAILED, ("Redis is loading its data into memory (it restarted): nothing to fix, run the "
                             "command again once it has loaded")
    if _is(e, "redis", "ConnectionError", "TimeoutError"):
        refused = "refused" in text.lower() or "111" in text
        cause = "refused the connection" if refused else f"cannot be reached ({text.rstrip('.')})"
        return EXIT_FAILED, f"Redis{_where(text)} {cause}: {REDIS_FIX}"
    return None


def _broker(e: BaseException) -> tuple[int, str] | None:
    text = str(e)
    if _is(e, "kombu", "OperationalError") or _is(e, "amqp", "RecoverableConnectionError", "ConnectionError"):
        return EXIT_FAILED, f"the broker cannot be reached ({text.rstrip('.') or type(e).__name__}): {BROKER_FIX}"
    return None


def _os(e: BaseException) -> tuple[int, str] | None:
    if not isinstance(e, OSError) or e.errno is None:
        return None
    path = f" {e.filename}" if e.filename else ""
    if e.errno == errno.EROFS:
        return EXIT_USAGE, (f"cannot write{path}: the file system is read-only: pass a writable path or mount it "
                            f"writable (shelly's own state: {STATE_FIX})")
    if e.errno == errno.EACCES:
        return EXIT_USAGE, f"permission denied:{path or ' ' + str(e)}: fix its permissions, or {STATE_FIX}"
    if e.errno == errno.ENOENT and e.filename:
        return EXIT_USAGE, f"no such file or directory:{path}: create it, or pass the right path"
    return None


def _module(e: BaseException) -> tuple[int, str] | None:
    if not isinstance(e, ImportError) or not e.name:
        return None
    top = e.name.split(".")[0]
    return EXIT_USAGE, (f'missing Python module "{e.name}": this installation is incomplete; '
                        f"reinstall with `pip install --force-reinstall shelly-dist` (or `pip install {top}`)")


def explain(exc: BaseException) -> tuple[int, str] | None:
    """``(exit code, one line)`` for a first-hour failure anywhere in ``exc``'s chain, else ``None``.

    A file-system error wrapped in a shelly error was already translated where it happened (the
    session store names ``SHELLY_STATE_DIR``), so only a bare one is explained here.
    """
    rules = [_module, _auth, _broker, _redis]  # most specific first: a broker error wraps a Redis one
    if not isinstance(exc, ShellyError):
        rules.append(_os)
    chain = list(_chain(exc))
    for rule in rules:
        for e in chain:
            found = rule(e)
            if found is not None:
                return found
    return None
