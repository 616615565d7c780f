"""First-hour failures get one line naming the cause and the fix, with the documented exit code,
never a traceback (``-v`` logs it). The exceptions are the real ones of redis-py, kombu and the OS,
wrapped the way shelly's layers wrap them."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.exceptions
from click.testing import CliRunner, Result
from kombu.exceptions import OperationalError

from shelly_dist.cli.errors import describe
from shelly_dist.cli.main import cli
from shelly_dist.errors import StoreError

from .conftest import write_config


def wrapped(cause: BaseException, origin: str = "journal") -> StoreError:
    """``cause`` as the state layer re-raises it (``redis_errors``)."""
    try:
        raise StoreError(f"{origin}: redis error: {type(cause).__name__}: {cause}") from cause
    except StoreError as exc:
        return exc


def test_refused_redis_names_the_address_and_the_setting() -> None:
    exc = wrapped(redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6421. Connection refused."))
    code, line = describe(exc)
    assert code == 1
    assert line == ("Redis at 127.0.0.1:6421 refused the connection: start Redis, or fix distributed.redis_url "
                    "(or SHELLY_REDIS_URL)")


def test_wrong_redis_password_is_a_config_error_naming_the_url_form() -> None:
    code, line = describe(wrapped(redis.exceptions.AuthenticationError("invalid username-password pair")))
    assert code == 2 and line.startswith("Redis refused the password: ") and "redis://:PASSWORD@" in line


def test_missing_redis_password_says_none_was_given() -> None:
    code, line = describe(wrapped(redis.exceptions.AuthenticationError("Authentication required.")))
    assert code == 2 and "requires a password and none was given" in line


def test_unreachable_broker_names_the_broker_setting() -> None:
    try:
        raise OperationalError("[Errno 111] Connection refused") from ConnectionRefusedError(111, "refused")
    except OperationalError as exc:
        code, line = describe(exc)
    assert code == 1 and line.startswith("the broker cannot be reached") and "distributed.broker_url" in line


def test_missing_module_names_it_and_how_to_install() -> None:
    code, line = describe(ModuleNotFoundError("No module named 'packaging'", name="packaging"))
    assert code == 2 and 'missing Python module "packaging"' in line and "pip install packaging" in line


def test_read_only_file_system_names_the_path_and_the_state_dir_variable() -> None:
    code, line = describe(OSError(errno.EROFS, "Read-only file system", "/srv/.shelly/local"))
    assert code == 2 and "/srv/.shelly/local" in line and "read-only" in line and "SHELLY_STATE_DIR" in line


def test_missing_directory_names_the_path() -> None:
    code, line = describe(FileNotFoundError(errno.ENOENT, "No such file or directory", "/nope/out.jsonl"))
    assert code == 2 and line == "no such file or directory: /nope/out.jsonl: create it, or pass the right path"


def test_an_ordinary_failure_keeps_its_own_message() -> None:
    assert describe(StoreError("sessions: session 0123456789abcdef not found")) == (
        1, "sessions: session 0123456789abcdef not found")


@pytest.fixture
def refused_run(workdir: Path) -> Callable[..., Result]:
    """``shelly [-v] run`` against a Redis port nobody listens on (6421 is this branch's)."""
    write_config(workdir, distributed={"redis_url": "redis://127.0.0.1:6421/0", "key_prefix": "inst-t:"},
                 agents=[{"name": "solo", "toolboxes": ["state"]}],
                 providers=[{"name": "p", "kind": "scripted", "model": "m", "script": {"*": [
                     {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "k", "value": "v"}}]},
                     "done"]}}])

    def run(*flags: str) -> Result:
        return CliRunner().invoke(cli, [*flags, "run", "--quiet", "task"], catch_exceptions=False)

    return run


def test_refused_redis_at_the_cli_is_one_line_and_exit_1(refused_run: Callable[..., Result]) -> None:
    result = refused_run()
    lines = [x for x in result.stderr.splitlines() if x.startswith("shelly:")]
    assert result.exit_code == 1, result.output
    assert lines == ["shelly: Redis at 127.0.0.1:6421 refused the connection: start Redis, or fix "
                     "distributed.redis_url (or SHELLY_REDIS_URL)"]
    assert "Traceback" not in result.stderr


def test_verbose_shows_the_traceback(refused_run: Callable[..., Result]) -> None:
    result = refused_run("-v")
    assert result.exit_code == 1 and "Traceback" in result.stderr


def test_a_file_error_already_translated_by_the_session_store_keeps_its_message() -> None:
    try:
        raise StoreError("sessions: cannot save session x in /st: No such file or directory (set SHELLY_STATE_DIR "
                         "to a writable directory)") from FileNotFoundError(errno.ENOENT, "No such file", "/st")
    except StoreError as exc:
        assert "SHELLY_STATE_DIR" in describe(exc)[1]


def test_redis_loading_its_data_is_not_told_to_be_started() -> None:
    loading = redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory")
    code, message = describe(loading)
    assert code == 1
    assert message.startswith("Redis is loading its data into memory (it restarted)") and "start Redis" not in message
