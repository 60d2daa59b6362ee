"""Remote teammates: a teammate (``t``) whose instance lives in a Ray actor.

``sup.teammate(Cls, remote=True)`` gives the same unit as a local teammate —
kind ``teammate``, a ``t`` ID, the same ``TeammateHandle`` (``tell``, ``ask``,
``proxy``, ``stop``), reachable by ID from any unit — whose instance runs in a
Ray actor (``remote.host.TeammateHost``) instead of a zygote-forked process.
The supervisor's routing of tells, asks and stops is unchanged: this actor
takes the same ``DeliverToUnit`` and ``StopTeammate`` messages as a local
teammate's actor, and reports each answer as ``Answered``.

Ending: ``kill`` is ``ray.kill`` of the actor; ``cancel`` is a direct call to
the host (``ctx.cancelled`` turns true, no further message is handled), then
``ray.kill`` after the grace. An actor that dies under the unit ends it
``failed`` with reason ``lost``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from workunits._core.errors import SpecError
from workunits._ray.actor import RemoteActor, pickle_call
from workunits._ray.placement import Placement, RemoteWork
from workunits._ray.runtime import RayApi, ray_options
from workunits._ray.worker.frames import RemoteCall
from workunits._wire import frames as m
from workunits._wire.actor_messages import Answered, DeliverToUnit, StopTeammate
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, name_of
from workunits.actors.teammate import TeammateActor


@dataclass(frozen=True, slots=True)
class RemoteTeammateSpec(RemoteWork):
    """A class to instantiate in a Ray actor, taking messages until stopped."""

    payload: bytes  # cloudpickled (cls, args, kwargs)
    name: str
    ray_options: dict[str, Any] = field(default_factory=dict)
    output_cap: int = DEFAULT_OUTPUT_CAP

    @classmethod
    def for_class(
        cls,
        teammate_cls: type[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        resources: Mapping[str, float] | None = None,
    ) -> RemoteTeammateSpec:
        """Pickle the class and its arguments now (caller's thread): SpecError registers nothing."""
        if not isinstance(teammate_cls, type):
            raise SpecError(f"a teammate is made from a class, got {type(teammate_cls).__name__}")
        name = name_of(teammate_cls)
        return cls(pickle_call(name, teammate_cls, args, kwargs), name, ray_options(resources))

    def place(self, api: RayApi, call: RemoteCall) -> Placement:
        return HostPlacement(api, call, self.ray_options)


class HostPlacement:
    """A remote teammate as one ``TeammateHost`` actor and its ``run`` stream."""

    def __init__(self, api: RayApi, call: RemoteCall, options: Mapping[str, Any]) -> None:
        self._api = api
        self.host: Any = api.host_class.options(
            max_restarts=0,  # a lost actor is the unit's end (reason lost), not a fresh instance
            max_task_retries=0,
            **options,
        ).remote(call)
        self.stream: Any = self.host.run.options(
            concurrency_group="life", num_returns="streaming"
        ).remote()

    def post(self, delivery: m.Deliver) -> None:
        # Fire and forget: an ask's answer comes up the stream, and an ask the host
        # can no longer take is failed by the supervisor when the unit ends.
        self.host.post.options(concurrency_group="mail").remote(
            delivery.token, delivery.message, delivery.ask
        )

    def stop(self) -> None:
        self.host.stop.options(concurrency_group="mail").remote()

    def kill(self) -> None:
        self._api.ray.kill(self.host, no_restart=True)

    def cancel(self) -> None:
        self.host.cancel.options(concurrency_group="control").remote()

    def release(self) -> None:
        # The stream has ended; the actor has nothing left to do but hold a worker.
        with contextlib.suppress(Exception):
            self._api.ray.kill(self.host, no_restart=True)


class RemoteTeammateActor(RemoteActor):
    """The ``t`` kind's actor for a ``RemoteTeammateSpec``; runs in its own pykka thread."""

    kind: ClassVar[str] = "teammate"
    accepts_messages: ClassVar[bool] = True

    def __init__(self, unit: Any) -> None:
        super().__init__(unit)
        # Messages the supervisor routed before the actor existed on Ray (it was starting).
        self._held: list[m.Deliver | None] = []

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, RemoteTeammateSpec):
            raise SpecError(f"a remote teammate needs a RemoteTeammateSpec, got {spec!r}")

    def on_receive(self, message: Any) -> Any:
        match message:
            case DeliverToUnit(delivery):
                self._to_host(delivery)
            case StopTeammate():
                self._to_host(None)
            case _:
                return super().on_receive(message)
        return None

    def _to_host(self, delivery: m.Deliver | None) -> None:
        """A message (None: the stop) for the host, in the order the supervisor sent them."""
        placement = self._placement
        if not isinstance(placement, HostPlacement):
            self._held.append(delivery)
            return
        if delivery is None:
            placement.stop()
        else:
            placement.post(delivery)

    def _placed(self) -> None:
        held, self._held = self._held, []
        for delivery in held:
            self._to_host(delivery)

    def _from_unit(self, frame: Any) -> None:
        if isinstance(frame, m.Answer):
            self.unit.tell_supervisor(Answered(self.unit.id, frame))
        else:
            super()._from_unit(frame)


def teammates_local_or_remote(remote: type[RemoteTeammateActor]) -> type[TeammateActor]:
    """The ``t`` kind for a supervisor with Ray: a RemoteTeammateSpec runs in ``remote``."""

    class Teammates(TeammateActor):
        @classmethod
        def validate_spec(cls, spec: Any) -> None:
            if not isinstance(spec, RemoteTeammateSpec):
                super().validate_spec(spec)

        @classmethod
        def actor_for(cls, spec: Any) -> type[TeammateActor] | type[RemoteTeammateActor]:
            return remote if isinstance(spec, RemoteTeammateSpec) else TeammateActor

    return Teammates
