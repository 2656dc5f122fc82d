"""Planners propose the next change to a kernel: `builtin` (offline search over the knowledge base)
and `anthropic` (an LLM through the Anthropic SDK). Both return data — edits or a whole program —
which the loop parses, verifies and evaluates like any other candidate."""

from __future__ import annotations

from argus.agent.planners.base import Attempt, Node, Planner, PlannerContext, PlannerError, Proposal


def make_planner(name: str, *, model: str | None = None, **kwargs) -> Planner:
    if name == "builtin":
        from argus.agent.planners.builtin import BuiltinPlanner

        return BuiltinPlanner(**kwargs)
    if name == "anthropic":
        from argus.agent.planners.anthropic_planner import AnthropicPlanner

        return AnthropicPlanner(model=model, **kwargs)
    raise PlannerError(f"unknown planner {name!r}: use builtin or anthropic")


__all__ = ["Attempt", "Node", "Planner", "PlannerContext", "PlannerError", "Proposal", "make_planner"]
