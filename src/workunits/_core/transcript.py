"""Reading an agent's transcript: its JSONL events, and each as a line a person reads.

A transcript (``<state dir>/transcripts/<id>.jsonl``, an agent's output file)
is one JSON object per line: ``seq`` and ``ts``, ``type``, and the fields of
that type -- ``start``, ``stdout``/``stderr``, ``progress``, ``checkpoint``,
``event`` (``ctx.emit``), ``step``, ``child``, ``result``, ``error``,
``cancelled``, ``exit``, ``handed-over`` (a deploy stopped the attempt; the
next one continues the file) and ``end``. ``read_transcript`` turns a file, or
the chunks of a stream (``client.stream(id)``, ``sup.stream(id)``), into
``TranscriptEvent``s; ``render_transcript`` into the lines ``workunits tail``
prints. A line that is not JSON (a unit that wrote to its transcript behind
its capture) is an event of type ``text``. Pure functions of what they are
given, safe in any thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

_READ = 1 << 16


@dataclass(frozen=True, slots=True)
class TranscriptEvent:
    """One event of a transcript: its ``type``, ``seq`` and ``ts`` (None on a ``text``
    line), and its other ``fields`` as the unit wrote them."""

    type: str
    seq: int | None = None
    ts: float | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_line(cls, line: bytes | str) -> TranscriptEvent:
        """The event on one line (without its newline); a ``text`` event if it is not one."""
        raw = line.encode() if isinstance(line, str) else line
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            return cls("text", fields={"line": raw.decode("utf-8", "replace")})
        seq, ts = doc.pop("seq", None), doc.pop("ts", None)
        return cls(
            str(doc.pop("type", "text")),
            seq if isinstance(seq, int) else None,
            float(ts) if isinstance(ts, int | float) else None,
            doc,
        )

    def render(self) -> str:
        """The event as ``workunits tail`` prints it (possibly several lines)."""
        if self.type == "text":
            return str(self.fields.get("line", ""))
        return render_event({"type": self.type, "seq": self.seq, "ts": self.ts, **self.fields})


def read_transcript(source: str | os.PathLike[str] | Iterable[bytes]) -> Iterator[TranscriptEvent]:
    """The events of a transcript: a file's path, or the byte chunks of a unit's output
    stream (``client.stream(id)`` follows it until the unit ends)."""
    chunks = _file_chunks(source) if isinstance(source, str | os.PathLike) else source
    for line in lines_of(chunks):
        if line.strip():
            yield TranscriptEvent.from_line(line)


def render_transcript(source: str | os.PathLike[str] | Iterable[bytes]) -> Iterator[str]:
    """``read_transcript``'s events, each as the line(s) a person reads."""
    for event in read_transcript(source):
        yield event.render()


def _file_chunks(path: str | os.PathLike[str]) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            yield chunk


def lines_of(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Complete lines, then whatever the chunks ended with after their last newline: the
    transcript's reader and ``tail --json`` split output alike."""
    rest = b""
    for chunk in chunks:
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def render_event(event: Mapping[str, Any]) -> str:
    """One transcript event (its JSON object) as a line a person reads."""
    kind = str(event.get("type"))
    render = _RENDERERS.get(kind)
    if render is not None:
        return render(event)
    shown = {k: v for k, v in event.items() if k not in ("seq", "ts")}
    return f"[{kind}] {orjson.dumps(shown, default=repr).decode()[:200]}"


def _output(event: Mapping[str, Any]) -> str:
    text = str(event.get("data")).rstrip("\n")
    if event.get("type") == "stdout":
        return text
    # One event may hold several lines: each is marked.
    return "\n".join(f"[stderr] {line}" for line in text.split("\n"))


def _progress(event: Mapping[str, Any]) -> str:
    fraction = event.get("fraction")
    pct = "" if fraction is None else f"{fraction * 100:3.0f}% "
    return f"[progress] {pct}{event.get('message', '')}"


def _start(event: Mapping[str, Any]) -> str:
    line = f"[start] {event.get('id')} attempt {event.get('attempt')} pid {event.get('pid')}"
    sandbox = event.get("sandbox")
    return line if not isinstance(sandbox, Mapping) else f"{line}; {_sandbox(sandbox)}"


def _sandbox(sandbox: Mapping[str, Any]) -> str:
    """The policy a unit runs under (``{}``: the default protection) and what was not enforced."""
    policy = sandbox.get("policy")
    missing = sandbox.get("not_enforced") or []
    shown = _json(policy) if policy else "default protection"
    return f"sandbox {shown}" + (f"; not enforced: {'; '.join(missing)}" if missing else "")


def _json(value: object) -> str:
    return orjson.dumps(value, default=repr).decode()[:200]


_RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "stdout": _output,
    "stderr": _output,
    "progress": _progress,
    "checkpoint": lambda e: f"[checkpoint] {_json(e.get('state'))}",
    "event": lambda e: f"[event] {_json(e.get('data'))}",
    "child": lambda e: f"[child] {e.get('child')} {e.get('status')}",
    "step": lambda e: (
        f"[step] {e.get('name')}" + (" (done by an earlier attempt)" if e.get("skipped") else "")
    ),
    "result": lambda e: f"[result] {_json(e.get('value'))}",
    "error": lambda e: f"[error] {e.get('error_type')}: {e.get('message')}",
    "cancelled": lambda e: "[cancelled] stopped where the cancel was asked for",
    "exit": lambda e: f"[exit] sys.exit with code {e.get('code')}",
    "start": _start,
    "handed-over": lambda e: (
        f"[handed-over] attempt {e.get('attempt')} stopped at a deploy; "
        f"the next supervisor resumes it"
    ),
    "end": lambda e: f"[end] {_end(e)}",
}


def _end(event: Mapping[str, Any]) -> str:
    """``completed``, ``failed (exit code 2)``, ``killed (cancelled)``, ``killed (SIGKILL)``."""
    status = str(event.get("status"))
    why = []
    if event.get("reason"):
        why.append(str(event["reason"]))
    if event.get("signal"):
        why.append(f"signal {event['signal']}")
    elif event.get("exit_code") not in (None, 0) or (status == "failed" and "exit_code" in event):
        why.append(f"exit code {event.get('exit_code')}")
    return f"{status} ({', '.join(why)})" if why else status
