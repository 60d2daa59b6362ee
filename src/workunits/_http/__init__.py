"""The HTTP API and web view (``workunits serve --http``; the ``workunits[http]`` extra).

Nothing outside this package imports it unless asked for HTTP: ``import
workunits`` loads none of FastAPI, uvicorn, sse-starlette or prometheus-client.
"""
