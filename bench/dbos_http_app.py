"""DBOS's HTTP path, for ``http_bench.py``: a minimal FastAPI app over DBOS workflows.

    python bench/dbos_http_app.py PORT SYSTEM_DATABASE_URL

The way DBOS apps expose workflows over HTTP: ``POST /workflows`` starts the
trivial one-step workflow and answers 201 with its ID once DBOS has recorded it
(``DBOS.start_workflow_async``); ``POST /stampers`` starts a workflow that writes
``n`` wall-clock stamps to a DBOS stream; ``GET /workflows/{id}/events`` follows
that stream as Server-Sent Events (``DBOS.read_stream_async``, DBOS's own
polling of its system database). It runs in its own process, as
``workunits serve --http`` does in the bench, and prints ``ready`` once listening.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator

import uvicorn
from dbos import DBOS
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

app = FastAPI()
POLL = 0.01


# Async workflows: started from the app's event loop, DBOS runs them on it.
@DBOS.step()
async def trivial_step() -> int:
    return 1


@DBOS.workflow()
async def trivial_workflow() -> int:
    return await trivial_step()


@DBOS.workflow()
async def stamper(n: int, pause: float) -> int:
    for _ in range(n):
        await DBOS.write_stream_async("progress", time.time())
        await DBOS.sleep_async(pause)
    await DBOS.close_stream_async("progress")
    return n


@app.post("/workflows", status_code=201)
async def submit() -> JSONResponse:
    handle = await DBOS.start_workflow_async(trivial_workflow)
    return JSONResponse({"id": handle.get_workflow_id()}, status_code=201)


@app.post("/stampers", status_code=201)
async def submit_stamper(n: int, pause: float) -> JSONResponse:
    handle = await DBOS.start_workflow_async(stamper, n, pause)
    return JSONResponse({"id": handle.get_workflow_id()}, status_code=201)


@app.get("/workflows/{workflow_id}/events")
async def events(workflow_id: str) -> StreamingResponse:
    async def stream() -> AsyncIterator[str]:
        # SQLite has no LISTEN/NOTIFY: DBOS polls (1 s by default; 10 ms here).
        values = DBOS.read_stream_async(workflow_id, "progress", polling_interval_sec=POLL)
        async for value in values:
            yield f"event: progress\ndata: {json.dumps(value)}\n\n"
        yield "event: end\ndata: {}\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


def main() -> None:
    port, url = int(sys.argv[1]), sys.argv[2]
    DBOS(config={"name": "workunits-bench", "system_database_url": url})
    DBOS.launch()  # DBOS 3 no longer takes the FastAPI app: launched before serving
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
