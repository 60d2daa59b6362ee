"""Render the HTTP API's OpenAPI schema into docs/reference/http.md.

    PYTHONPATH=src python docs/_http_reference.py

The page is committed; tests/test_docs_site.py fails when it is not what this
script renders from the app as it is now, so the page cannot drift from the code.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent / "reference" / "http.md"

INTRO = """# HTTP API

Generated from the app's OpenAPI schema (`/openapi.json`) by
`docs/_http_reference.py`; a test fails when this page is out of date. How to
use it: [The HTTP API and the web view](../guides/http.md). Every path but
`/healthz` needs `Authorization: Bearer <token>` (the token is `http.token` in
the state dir); errors are `application/problem+json`.
"""


def openapi() -> dict[str, Any]:
    """The schema of the app ``serve --http`` runs (built over a throwaway supervisor)."""
    import workunits as wu  # noqa: PLC0415 - the script's only heavy import
    from workunits._http.app import create_app  # noqa: PLC0415
    from workunits._http.backend import Backend  # noqa: PLC0415

    with (
        tempfile.TemporaryDirectory() as tmp,
        wu.Supervisor(Path(tmp) / "s", install_signal_handlers=False) as sup,
    ):
        app, _ = create_app(Backend(sup), "x" * 43)
        return app.openapi()


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for alternatives in ("anyOf", "oneOf"):
        if alternatives in schema:
            return " or ".join(_type(s) for s in schema[alternatives])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(spec: dict[str, Any]) -> str:
    """The Markdown page for ``spec``: each operation, then each schema."""
    out = [INTRO]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            out.append(f"## `{method.upper()} {path}`\n")
            if op.get("description"):
                out.append(op["description"].strip() + "\n")
            elif op.get("summary"):
                out.append(op["summary"] + "\n")
            params = op.get("parameters", [])
            if params:
                out.append("| Parameter | In | Type | Required | |\n|---|---|---|---|---|")
                for p in params:
                    desc = _cell(p.get("description", p["schema"].get("description", "")))
                    required = "yes" if p.get("required") else ""
                    kind = _type(p["schema"])
                    out.append(f"| `{p['name']}` | {p['in']} | {kind} | {required} | {desc} |")
                out.append("")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                out.append(f"Body ({media}): {_type(content.get('schema', {}))}\n")
            out.append("| Status | |\n|---|---|")
            for code, response in op.get("responses", {}).items():
                contents = response.get("content", {}).values()
                schemas = [_type(c["schema"]) for c in contents if "schema" in c]
                extra = f" ({', '.join(s for s in schemas if s != 'any')})" if schemas else ""
                out.append(f"| {code} | {_cell(response.get('description', ''))}{extra} |")
            out.append("")
    out.append("## Schemas\n")
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out.append(f"### {name}\n")
        if schema.get("description"):
            out.append(_cell(schema["description"]) + "\n")
        props = schema.get("properties", {})
        if props:
            needed = set(schema.get("required", []))
            out.append("| Field | Type | Required | |\n|---|---|---|---|")
            for field, prop in props.items():
                req = "yes" if field in needed else ""
                desc = _cell(prop.get("description", ""))
                out.append(f"| `{field}` | {_type(prop)} | {req} | {desc} |")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    PAGE.write_text(render(openapi()), encoding="utf-8")
    sys.stdout.write(f"wrote {PAGE}\n")
