"""An agent hierarchy on the embedded default: the README's demo.

A coordinator agent, in its own process, starts three sub-agents (one returns
a result, one raises, one is killed) and a shell child. It prints each child's
notification as it arrives; afterwards the application prints the tree and the
tail of each transcript.

    python examples/agent_tree.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterable, Iterator

import orjson

import workunits as wu


def research(topic: str) -> dict[str, object]:
    ctx = wu.current()
    for step in range(1, 4):
        ctx.progress(step / 3, f"reading source {step}/3 on {topic}")
        print(f"notes on {topic}, source {step}")
    return {"topic": topic, "findings": 3}


def flaky_tool() -> None:
    print("calling a tool that breaks")
    raise RuntimeError("the tool returned garbage")


def endless_search() -> None:
    ctx = wu.current()
    ctx.emit({"status": "searching forever"})
    while True:
        time.sleep(0.05)


def next_notice(inbox: wu.Mailbox) -> wu.Notification:
    """The next end of a child (a mailbox also carries monitors' events; none here)."""
    item = inbox.get(timeout=30)
    assert isinstance(item, wu.Notification)
    return item


def coordinator(topic: str) -> dict[str, object]:
    ctx = wu.current()
    good = ctx.agent(research, topic, description=f"research {topic}")
    bad = ctx.agent(flaky_tool, description="flaky tool")
    slow = ctx.agent(endless_search, description="endless search")
    shell = ctx.shell("echo building index; ls / | head -3", description="index")
    inbox = ctx.notifications()
    print(f"coordinator {ctx.id} started {good.id} {bad.id} {slow.id} {shell.id}")
    summary: dict[str, object] = {}
    for _ in range(3):  # research, flaky tool and the shell end by themselves
        notice = next_notice(inbox)
        print(f"  notice: {notice.id} ({notice.description}) -> {notice.status.value}")
        summary[notice.description] = notice.status.value
    ctx.kill(slow)
    notice = next_notice(inbox)
    print(f"  notice: {notice.id} ({notice.description}) -> {notice.status.value}")
    summary[notice.description] = f"{notice.status.value} ({notice.reason})"
    summary["research result"] = good.result()
    return summary


def lines_of(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Whole lines from a stream of chunks (a chunk may end mid-line)."""
    rest = b""
    for chunk in chunks:
        *whole, rest = (rest + chunk).split(b"\n")
        yield from whole
    if rest:
        yield rest


def render(line: bytes) -> str:
    """One transcript event (a JSON line) as a person reads it: output as is, the rest tagged."""
    event = orjson.loads(line)
    kind = event.get("type")
    if kind in ("stdout", "stderr"):
        text = str(event.get("data")).rstrip("\n")
        return text if kind == "stdout" else f"[stderr] {text}"
    if kind == "progress":
        return f"[progress] {event.get('message', '')}"
    if kind == "error":
        return f"[error] {event.get('error_type')}: {event.get('message')}"
    shown = {k: v for k, v in event.items() if k not in ("type", "seq", "ts")}
    return f"[{kind}] {orjson.dumps(shown).decode()[:200]}"


def main(state_dir: str) -> int:
    with wu.Supervisor(state_dir) as sup:
        root = sup.agent(coordinator, "actor supervision", description="coordinator")
        print(f"started {root.id}; its transcript, live:")
        for line in lines_of(sup.stream(root.id)):
            for text in render(line).splitlines():
                print(f"  | {text}")
        record = sup.wait(root.id, timeout=60)
        print(f"\n{root.id} ended {record.status.value}; result:")
        for key, value in sup.result(root.id).items():
            print(f"  {key}: {value}")
        print("\nthe tree:")
        print(sup.tree(root.id))
        print("\ntranscript tails:")
        for child in sup.list(parent=root.id):
            print(f"--- {child.id} {child.description}")
            tail = child.output_tail.strip().splitlines()[-3:]
            for line in tail:
                text = render(line) if child.kind == "agent" else line.decode()
                print(f"  | {text}")
        notice = next_notice(sup.notifications())
        print(f"\napplication notice: {notice.id} {notice.status.value}")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="workunits-demo-") as tmp:
        sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else tmp))
