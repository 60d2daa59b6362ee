"""A module for ``serve --import``: it makes a module that exists only once it ran.

``plugin_jobs`` is built here at import time, so a unit naming
``plugin_jobs:double_steps`` can run only where this module was imported first.
It also declares a custom kind.
"""

from __future__ import annotations

import sys
import types

import workunits as wu
from workunits.actors.agent import AgentActor


def double_steps(x: int) -> int:
    ctx = wu.current()
    once = ctx.step("double", lambda: x * 2)
    return int(ctx.step("plus one", lambda: once + 1))


class PluginAgent(AgentActor):
    kind = "plugin-agent"


jobs = types.ModuleType("plugin_jobs")
double_steps.__module__ = "plugin_jobs"
jobs.double_steps = double_steps  # type: ignore[attr-defined]
sys.modules["plugin_jobs"] = jobs

WORKUNITS_KINDS = {"x": PluginAgent}
