"""workunits: supervised, durable work units for agent runtimes.

The supervisor, the client and the actor base are imported on first use (see
``_util.lazy``): a unit process, forked from a zygote that imports this package,
needs only the unit runtime.
"""

from typing import TYPE_CHECKING

from workunits._core.claim import Claim as Claim
from workunits._core.errors import AskTimeout as AskTimeout
from workunits._core.errors import BatchItemsFailed as BatchItemsFailed
from workunits._core.errors import Cancelled as Cancelled
from workunits._core.errors import ClientClosed as ClientClosed
from workunits._core.errors import CommitUnknown as CommitUnknown
from workunits._core.errors import IdempotencyConflict as IdempotencyConflict
from workunits._core.errors import InvalidArgument as InvalidArgument
from workunits._core.errors import InvalidTransition as InvalidTransition
from workunits._core.errors import InvalidWorkId as InvalidWorkId
from workunits._core.errors import KindFault as KindFault
from workunits._core.errors import KindTaken as KindTaken
from workunits._core.errors import LedgerCorrupt as LedgerCorrupt
from workunits._core.errors import LedgerError as LedgerError
from workunits._core.errors import LedgerFull as LedgerFull
from workunits._core.errors import LedgerGone as LedgerGone
from workunits._core.errors import LedgerTampered as LedgerTampered
from workunits._core.errors import LedgerVersionError as LedgerVersionError
from workunits._core.errors import MailboxClosed as MailboxClosed
from workunits._core.errors import NoCurrentUnit as NoCurrentUnit
from workunits._core.errors import NoLedger as NoLedger
from workunits._core.errors import NoNotification as NoNotification
from workunits._core.errors import NoSuchMethod as NoSuchMethod
from workunits._core.errors import NotFinished as NotFinished
from workunits._core.errors import NotRetryable as NotRetryable
from workunits._core.errors import SandboxEscalation as SandboxEscalation
from workunits._core.errors import SandboxUnavailable as SandboxUnavailable
from workunits._core.errors import SecretFileError as SecretFileError
from workunits._core.errors import ServerUnreachable as ServerUnreachable
from workunits._core.errors import SessionLost as SessionLost
from workunits._core.errors import SignalTimeout as SignalTimeout
from workunits._core.errors import SpecError as SpecError
from workunits._core.errors import StaleAttempt as StaleAttempt
from workunits._core.errors import StateDirError as StateDirError
from workunits._core.errors import SupervisorBusy as SupervisorBusy
from workunits._core.errors import SupervisorClosed as SupervisorClosed
from workunits._core.errors import TeammateEnded as TeammateEnded
from workunits._core.errors import TeammateError as TeammateError
from workunits._core.errors import TeammateRestarted as TeammateRestarted
from workunits._core.errors import UnknownKind as UnknownKind
from workunits._core.errors import UnknownWork as UnknownWork
from workunits._core.errors import UnloadableValue as UnloadableValue
from workunits._core.errors import UnstorableValue as UnstorableValue
from workunits._core.errors import ValueVersionMismatch as ValueVersionMismatch
from workunits._core.errors import WorkExpired as WorkExpired
from workunits._core.errors import WorkFailed as WorkFailed
from workunits._core.errors import WorkKilled as WorkKilled
from workunits._core.errors import WorkunitsError as WorkunitsError
from workunits._core.errors import WrongType as WrongType
from workunits._core.ids import is_valid as is_valid_id
from workunits._core.ids import mint as mint_id
from workunits._core.record import MailboxItem as MailboxItem
from workunits._core.record import MonitorEvent as MonitorEvent
from workunits._core.record import Notification as Notification
from workunits._core.record import Outcome as Outcome
from workunits._core.record import OutputChunk as OutputChunk
from workunits._core.record import StallEvent as StallEvent
from workunits._core.record import WorkRecord as WorkRecord
from workunits._core.retain import Retain as Retain
from workunits._core.retry import Attempt as Attempt
from workunits._core.retry import Retry as Retry
from workunits._core.sandbox import Sandbox as Sandbox
from workunits._core.schedule import ScheduleFiring as ScheduleFiring
from workunits._core.schedule import ScheduleInfo as ScheduleInfo
from workunits._core.status import Reason as Reason
from workunits._core.status import Status as Status
from workunits._core.status import is_terminal as is_terminal
from workunits._core.transcript import TranscriptEvent as TranscriptEvent
from workunits._core.transcript import read_transcript as read_transcript
from workunits._core.transcript import render_transcript as render_transcript
from workunits._unit.child_handles import ChildHandle as ChildHandle
from workunits._unit.child_handles import ChildTeammate as ChildTeammate
from workunits._unit.context import UnitContext as UnitContext
from workunits._unit.context import current as current
from workunits._util import lazy as _lazy  # not a public name of the package
from workunits._wire.agent_call import AgentCall as AgentCall

if TYPE_CHECKING:
    from workunits._client.http_client import HttpClient as HttpClient
    from workunits._client.http_client import HttpHandle as HttpHandle
    from workunits._client.ledger_client import Client as Client
    from workunits._client.ledger_client import ClientHandle as ClientHandle
    from workunits._client.ledger_client import connect as connect
    from workunits._client.ledger_client import connect_async as connect_async
    from workunits._core.mailbox import Mailbox as Mailbox
    from workunits.actors.base import WorkActor as WorkActor
    from workunits.supervisor.executor import AgentExecutor as AgentExecutor
    from workunits.supervisor.executor import UnitFuture as UnitFuture
    from workunits.supervisor.facade import Supervisor as Supervisor
    from workunits.supervisor.handle import WorkHandle as WorkHandle
    from workunits.supervisor.pool import Pool as Pool
    from workunits.supervisor.teammate import TeammateHandle as TeammateHandle
    from workunits.supervisor.teammate import TeammateProxy as TeammateProxy

__all__ = [
    "AgentCall",
    "AgentExecutor",
    "AskTimeout",
    "Attempt",
    "BatchItemsFailed",
    "Cancelled",
    "ChildHandle",
    "ChildTeammate",
    "Claim",
    "Client",
    "ClientClosed",
    "ClientHandle",
    "CommitUnknown",
    "IdempotencyConflict",
    "InvalidArgument",
    "InvalidTransition",
    "InvalidWorkId",
    "KindFault",
    "KindTaken",
    "LedgerCorrupt",
    "LedgerError",
    "LedgerFull",
    "LedgerGone",
    "LedgerTampered",
    "LedgerVersionError",
    "Mailbox",
    "MailboxClosed",
    "MailboxItem",
    "MonitorEvent",
    "NoCurrentUnit",
    "NoLedger",
    "NoNotification",
    "NoSuchMethod",
    "NotFinished",
    "NotRetryable",
    "Notification",
    "Outcome",
    "OutputChunk",
    "Pool",
    "Reason",
    "Retain",
    "Retry",
    "Sandbox",
    "SandboxEscalation",
    "SandboxUnavailable",
    "ScheduleFiring",
    "ScheduleInfo",
    "SecretFileError",
    "ServerUnreachable",
    "SessionLost",
    "SignalTimeout",
    "SpecError",
    "StaleAttempt",
    "StallEvent",
    "StateDirError",
    "Status",
    "Supervisor",
    "SupervisorBusy",
    "SupervisorClosed",
    "TeammateEnded",
    "TeammateError",
    "TeammateHandle",
    "TeammateProxy",
    "TeammateRestarted",
    "TranscriptEvent",
    "UnitContext",
    "UnitFuture",
    "UnknownKind",
    "UnknownWork",
    "UnloadableValue",
    "UnstorableValue",
    "ValueVersionMismatch",
    "WorkActor",
    "WorkExpired",
    "WorkFailed",
    "WorkHandle",
    "WorkKilled",
    "WorkRecord",
    "WorkunitsError",
    "WrongType",
    "connect",
    "connect_async",
    "current",
    "is_terminal",
    "is_valid_id",
    "mint_id",
    "read_transcript",
    "render_transcript",
]
__version__ = "0.1.0"

__getattr__, __dir__ = _lazy.exports(
    __name__,
    globals(),
    {
        "WorkActor": "workunits.actors.base",
        "Client": "workunits._client.ledger_client",
        "ClientHandle": "workunits._client.ledger_client",
        "connect": "workunits._client.ledger_client",
        "connect_async": "workunits._client.ledger_client",
        # Not in __all__: they need the http extra (httpx), and a star import of
        # this package must work without it.
        "HttpClient": "workunits._client.http_client",
        "HttpHandle": "workunits._client.http_client",
        "Supervisor": "workunits.supervisor.facade",
        "WorkHandle": "workunits.supervisor.handle",
        "Mailbox": "workunits._core.mailbox",
        "Pool": "workunits.supervisor.pool",
        "AgentExecutor": "workunits.supervisor.executor",
        "UnitFuture": "workunits.supervisor.executor",
        "TeammateHandle": "workunits.supervisor.teammate",
        "TeammateProxy": "workunits.supervisor.teammate",
    },
)
