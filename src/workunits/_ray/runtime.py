"""``RayRuntime``: Ray as one supervisor uses it, connected (or started) on demand.

Runs in the supervisor process. ``ray.init`` and ``ray.shutdown`` both run in
one thread, ``workunits-ray``, that lives until ``close()``: a local Ray's own
processes (GCS, raylet) carry a parent-death signal that fires when the *thread*
that started them exits (DESIGN §9), so starting Ray from a unit's short-lived
actor thread would kill the cluster when that unit ended. The first remote unit
starts the thread; units that arrive while Ray starts wait in a callback list,
and no actor thread blocks on the start.

If Ray is already initialised in this process when the first remote unit
arrives, that connection is used as it is and is left running at ``close()``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workunits._core.errors import SpecError
from workunits._ray.follower import Followers

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "workunits[ray]"'

# AF_UNIX paths are at most 107 bytes; Ray puts "session_<date>_<pid>/sockets/plasma_store"
# (about 62 bytes) under its temp dir.
_RAY_SOCKET_SUFFIX = 64
_UNIX_PATH_MAX = 107

ReadyCallback = Callable[["RayApi | None", "str | None"], None]


def check_available() -> None:
    """Raise SpecError naming the extra when Ray is not installed (imports nothing)."""
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # e.g. sys.modules["ray"] = None, a blocked import
        found = False
    if not found:
        raise SpecError(f"remote units run on Ray, which is not installed: {INSTALL_HINT}")


def ray_options(resources: Mapping[str, float] | None) -> dict[str, Any]:
    """``.options()`` keywords for Ray from ``{"CPU": 1, "GPU": 1, "memory": bytes, "x": 2}``."""
    options: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for name, amount in (resources or {}).items():
        if not isinstance(name, str) or not name:
            raise SpecError(f"resource names are non-empty str, got {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not amount >= 0:
            raise SpecError(f"resource {name!r} needs an amount >= 0, got {amount!r}")
        if name == "CPU":
            options["num_cpus"] = amount
        elif name == "GPU":
            options["num_gpus"] = amount
        elif name == "memory":
            options["memory"] = amount
        else:
            custom[name] = float(amount)
    if custom:
        options["resources"] = custom
    return options


TASK_OPTIONS: dict[str, Any] = {
    "num_returns": "streaming",
    "max_retries": 0,  # a lost worker is the unit's end (reason lost), not a silent rerun
    "retry_exceptions": False,
    "_generator_backpressure_num_objects": 64,
}

_MAX_CACHED_OPTIONS = 64


@dataclass(frozen=True, slots=True)
class RayApi:
    """What remote units use once Ray is up. Methods are called from unit actor threads."""

    ray: Any  # the ray module
    task: Any  # run_task as a Ray remote function
    host_class: Any  # TeammateHost as a Ray actor class
    board: Any  # this supervisor's CancelBoard actor
    board_name: str  # its name: what a task is given (see RemoteContext)
    owned: bool  # we called ray.init, so we call ray.shutdown
    followers: Followers  # the threads that read units' streams
    # ``.options()`` costs a Ray task ~0.5 ms: one wrapper per set of resources.
    _tasks: dict[str, Any] = field(default_factory=dict)

    def task_for(self, resources: Mapping[str, Any]) -> Any:
        """``run_task`` with these resources (dict updates are atomic: threads may share it)."""
        key = repr(sorted(resources.items()))
        task = self._tasks.get(key)
        if task is None:
            task = self.task.options(**TASK_OPTIONS, **resources)
            if len(self._tasks) < _MAX_CACHED_OPTIONS:
                self._tasks[key] = task
        return task

    def request_cancel(self, key: str) -> None:
        self.board.cancel.remote(key)

    def forget(self, key: str) -> None:
        self.board.forget.remote(key)


class RayRuntime:
    """Thread-safe; one per ``Supervisor``. Nothing here imports ray until a unit needs it."""

    def __init__(
        self,
        *,
        address: str | None,
        temp_dir: Path | None,
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._address = address
        self._temp_dir = temp_dir
        self._init_options = dict(init_options or {})
        # Guards _api, _waiting and _thread; held for O(1) work. Connecting to Ray
        # (seconds) runs in the workunits-ray thread, outside it.
        self._lock = threading.Lock()
        self._api: RayApi | None = None
        self._waiting: list[ReadyCallback] = []
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()

    def ready(self) -> RayApi | None:
        """The API if Ray is up, else None (never blocks)."""
        return self._api

    def when_ready(self, callback: ReadyCallback) -> None:
        """Call ``callback(api, None)`` once Ray is up, or ``callback(None, error)``.

        Runs ``callback`` at once if Ray is up already, else later in the
        ``workunits-ray`` thread (where it must only tell an actor).
        """
        with self._lock:
            api = self._api
            if api is None:
                if self._closing.is_set():
                    error = "the supervisor is closing"
                else:
                    self._waiting.append(callback)
                    if self._thread is None:
                        self._thread = threading.Thread(
                            target=self._run, name="workunits-ray", daemon=True
                        )
                        self._thread.start()
                    return
        if api is not None:
            callback(api, None)
        else:
            callback(None, error)

    def close(self, timeout: float = 30.0) -> None:
        """Release Ray: kill our board actor; shut Ray down if we started it."""
        with self._lock:
            self._closing.set()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    # -- the workunits-ray thread ----------------------------------------------------

    def _run(self) -> None:
        """Connect, hand the API out, then keep this thread alive until close()."""
        api: RayApi | None = None
        error: str | None = None
        try:
            api = self._connect()
        except Exception as exc:  # noqa: BLE001 - any failure to reach Ray fails the waiting units
            error = f"could not start or reach Ray: {type(exc).__name__}: {exc}"
            log.warning("%s", error)
        with self._lock:
            self._api = api
            waiting, self._waiting = self._waiting, []
            if api is None:
                self._thread = None  # the next remote unit tries again
        for callback in waiting:
            callback(api, error)
        if api is None:
            return
        self._closing.wait()
        self._disconnect(api)

    def _connect(self) -> RayApi:
        import ray  # noqa: PLC0415 - optional dependency, imported on first use
        from ray.util.scheduling_strategies import (  # noqa: PLC0415
            NodeAffinitySchedulingStrategy,
        )

        from workunits._ray.worker.board import CancelBoard  # noqa: PLC0415
        from workunits._ray.worker.host import HOST_CONCURRENCY, TeammateHost  # noqa: PLC0415
        from workunits._ray.worker.task import run_task  # noqa: PLC0415

        owned = False
        if not ray.is_initialized():
            notice = logging.getLogger("ray._private.worker")
            notice.addFilter(_drop_sigterm_notice)
            try:
                ray.init(**self._init_kwargs())
            finally:
                notice.removeFilter(_drop_sigterm_notice)
            owned = True
        here = ray.get_runtime_context().get_node_id()
        board_name = f"workunits-cancel-board-{uuid.uuid4().hex}"  # one per supervisor
        board = (
            ray.remote(CancelBoard)
            .options(
                name=board_name,
                num_cpus=0,
                # Near the supervisor, which sends it every request; anywhere if it must.
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
            )
            .remote()
        )
        return RayApi(
            ray=ray,
            task=ray.remote(run_task),
            host_class=ray.remote(concurrency_groups=HOST_CONCURRENCY)(TeammateHost),
            board=board,
            board_name=board_name,
            owned=owned,
            followers=Followers(),
        )

    def _init_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,  # unit output comes back through its stream, not Ray's logs
            "logging_level": logging.WARNING,
            "configure_logging": False,  # leave the application's logging alone
        }
        if self._address is not None:
            kwargs["address"] = self._address
        else:
            temp_dir = self._temp_dir
            if temp_dir is not None and len(str(temp_dir)) + _RAY_SOCKET_SUFFIX <= _UNIX_PATH_MAX:
                temp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                kwargs["_temp_dir"] = str(temp_dir)
            # else: too long for Ray's socket paths; Ray picks its default temp dir
        kwargs.update(self._init_options)
        return kwargs

    def _disconnect(self, api: RayApi) -> None:
        api.followers.close()
        with contextlib.suppress(Exception):  # Ray may already be down; nothing to release then
            api.ray.kill(api.board)
        if api.owned:
            api.ray.shutdown()


def _drop_sigterm_notice(record: logging.LogRecord) -> bool:
    """Ray warns that ``ray.init`` outside the main thread installs no SIGTERM handler.

    That is on purpose here: the application's handler (and workunits' cleanup,
    which kills running work) stays in place instead of Ray's ``sys.exit``.
    """
    return not record.getMessage().startswith("SIGTERM handler is not set")
