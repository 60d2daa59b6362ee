"""The tools as a model sees them: name, description, JSON schema of the arguments.

Written for a model that has no other documentation: each description says
what the tool does, what it answers and what to call next. Data only; the
handlers are in ``tools.py``.
"""

from __future__ import annotations

from typing import Any

ID = {
    "type": "string",
    "pattern": "^[a-z][0-9a-z]{8}$",
    "description": "A unit ID as start_shell, start_agent or list_units gave it, e.g. b4k2x9q0m.",
}
SANDBOX = {
    "type": "string",
    "enum": ["read_only", "workspace", "none"],
    "description": "Confine the unit more than the server's default: read_only (writes "
    "nowhere but a private temp dir) or workspace (writes only inside the workspace, or "
    "inside workspace_dir). Omit it for the server's default; a broader sandbox than the "
    "server's is refused.",
}
WORKSPACE_DIR = {
    "type": "string",
    "description": "With sandbox 'workspace': a directory inside the server's workspace "
    "(relative to it) that the unit may write in, instead of the whole workspace.",
}
TIMEOUT = {
    "type": "number",
    "exclusiveMinimum": 0,
    "description": "Kill the unit if it runs longer than this many seconds (default: no limit).",
}
KEY = {
    "type": "string",
    "maxLength": 200,
    "description": "Idempotency key: starting again with the same key returns the unit it "
    "already names instead of a second one (safe to repeat after a lost answer).",
}
DESCRIPTION = {
    "type": "string",
    "maxLength": 500,
    "description": "A short label shown in listings and notices.",
}


def _obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "start_shell": (
        "Start a shell command in the background and answer at once with its unit ID "
        "(b...). The command runs under /bin/sh -c in its own process group, confined by "
        "the server's sandbox; stdout and stderr go to its output. Read the output with "
        "read_output, learn of its end with wait_for or take_notices, stop it with kill.",
        _obj(
            {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The command line, as you would type it in a shell.",
                },
                "description": DESCRIPTION,
                "timeout": TIMEOUT,
                "key": KEY,
                "cwd": {
                    "type": "string",
                    "description": "Directory to run in, relative to the server's workspace "
                    "(default: the workspace).",
                },
                "sandbox": SANDBOX,
                "workspace_dir": WORKSPACE_DIR,
                "stdin": {
                    "type": "boolean",
                    "default": False,
                    "description": "true: the command's standard input is a pipe you write "
                    "to with send_input (default: it reads nothing, /dev/null).",
                },
            },
            ("command",),
        ),
    ),
    "start_agent": (
        "Start a Python agent in the background and answer at once with its unit ID "
        "(a...). target must be one of the importable functions the operator allowed "
        "(the error lists them); args and kwargs are JSON. An agent that checkpoints "
        "resumes under the same ID if the server restarts. Read its transcript with "
        "read_output, its end with wait_for or take_notices.",
        _obj(
            {
                "target": {
                    "type": "string",
                    "description": "An allowed 'package.module:function'.",
                },
                "args": {"type": "array", "description": "Positional arguments (JSON)."},
                "kwargs": {"type": "object", "description": "Keyword arguments (JSON)."},
                "description": DESCRIPTION,
                "timeout": TIMEOUT,
                "key": KEY,
                "sandbox": SANDBOX,
                "workspace_dir": WORKSPACE_DIR,
            },
            ("target",),
        ),
    ),
    "list_units": (
        "List units, newest first, a page at a time: ID, kind, status, description, "
        "times, exit code. Filter by status (pending, running, completed, failed, killed) "
        "or kind (shell, agent, ...). Pass the answer's 'next' as 'after' for the next page.",
        _obj(
            {
                "status": {
                    "type": "string",
                    "enum": ["pending", "running", "completed", "failed", "killed", "expired"],
                },
                "kind": {"type": "string", "description": "shell, agent, workflow, ..."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                "after": {**ID, "description": "The 'next' of the previous page."},
            }
        ),
    ),
    "get_unit": (
        "Everything about one unit: status, exit code or signal, error, reason it ended, "
        "progress, attempt, output size, times.",
        _obj({"id": ID}, ("id",)),
    ),
    "read_output": (
        "Read a unit's output from a byte offset: answers the text, next_offset (pass it "
        "as offset next time: nothing is lost or repeated) and whether more is coming. "
        "At most max_bytes per call (the server caps it); a cut answer says so. Works while "
        "the unit runs and after it ended.",
        _obj(
            {
                "id": ID,
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "max_bytes": {"type": "integer", "minimum": 1},
            },
            ("id",),
        ),
    ),
    "wait_for": (
        "Wait until one of the given units ends, at most timeout seconds (the server caps "
        "it, 30 s by default). Answers with every one of them that has ended, and those "
        "still running. Call it again to keep waiting.",
        _obj(
            {
                "ids": {"type": "array", "items": ID, "minItems": 1, "maxItems": 100},
                "timeout": {"type": "number", "minimum": 0},
            },
            ("ids",),
        ),
    ),
    "kill": (
        "Kill a unit now (SIGKILL to its whole process tree); it ends 'killed'. False if "
        "it had already ended.",
        _obj({"id": ID}, ("id",)),
    ),
    "cancel": (
        "Stop a unit gently: SIGTERM (an agent: a cancel at its next checkpoint), then "
        "SIGKILL after grace seconds. It ends 'killed'.",
        _obj(
            {"id": ID, "grace": {"type": "number", "minimum": 0, "maximum": 300, "default": 5}},
            ("id",),
        ),
    ),
    "signal": (
        "Send a named signal with a JSON value to an agent that waits for it "
        "(ctx.wait_for(name)); kept until it does. Not a POSIX signal: use kill or cancel.",
        _obj({"id": ID, "name": {"type": "string", "minLength": 1}, "value": {}}, ("id", "name")),
    ),
    "send_input": (
        "Write text to the standard input of a unit started with stdin: true, after what "
        "was written before (an interactive program, a REPL). eof: true then closes its "
        "input, as Ctrl-D would: the program reads end of file.",
        _obj(
            {
                "id": ID,
                "data": {"type": "string", "maxLength": 1 << 20, "default": ""},
                "eof": {"type": "boolean", "default": False},
            },
            ("id",),
        ),
    ),
    "retry": (
        "Start a unit that failed or was killed again, as a new unit linked to it "
        "(retry_of); answers the new ID. Retrying it twice gives the same new unit.",
        _obj({"id": ID}, ("id",)),
    ),
    "restart": (
        "Run a unit's same command again as a new unit linked to the old one, killing the "
        "old one first if it still runs (a dev server after a change). Answers the new ID.",
        _obj({"id": ID}, ("id",)),
    ),
    "take_notices": (
        "Collect the ends of top-level units not yet taken: one notice per unit, status, "
        "exit code, error and the end of its output. Each notice goes to one session only; "
        "taking again acknowledges the previous batch (act on a batch before taking the "
        "next). Waits up to 'wait' seconds for a first one.",
        _obj(
            {
                "max": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                "wait": {"type": "number", "minimum": 0, "default": 0},
            }
        ),
    ),
    "ack_notices": (
        "Acknowledge notices this session took (all of them, or the given IDs) without "
        "taking more. Notices not acknowledged when the session ends go to the next taker.",
        _obj({"ids": {"type": "array", "items": ID}}),
    ),
    "wait_for_output": (
        "Wait until a line of a unit's output matches a regular expression (e.g. "
        "'listening on'), at most timeout seconds. Answers the matching line and its offset, "
        "or that the unit ended or the time ran out first. Scans from offset (default 0).",
        _obj(
            {
                "id": ID,
                "pattern": {"type": "string", "minLength": 1},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "timeout": {"type": "number", "minimum": 0},
            },
            ("id", "pattern"),
        ),
    ),
    "search_output": (
        "Search a unit's whole output for lines matching a regular expression; answers "
        "each matching line with its byte offset (read around it with read_output).",
        _obj(
            {
                "id": ID,
                "pattern": {"type": "string", "minLength": 1},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "max_matches": {"type": "integer", "minimum": 1, "maximum": 50, "default": 20},
            },
            ("id", "pattern"),
        ),
    ),
}
