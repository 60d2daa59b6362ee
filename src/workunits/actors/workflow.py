"""Workflow units (``w``): an agent whose body is durable steps.

``ctx.step(name, fn, *args)`` runs a step once and checkpoints its JSON result;
a resumed attempt returns stored results without running those steps again,
and a cancel takes effect between steps. The unit process does the step
bookkeeping (runtime/steps.py); on this side a workflow is an agent.
"""

from __future__ import annotations

from typing import ClassVar

from workunits.actors.agent import AgentActor


class WorkflowActor(AgentActor):
    kind: ClassVar[str] = "workflow"
