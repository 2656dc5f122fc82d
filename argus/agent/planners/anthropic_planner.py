"""The Anthropic planner: asks a Claude model (through the `anthropic` SDK) for the next change.

The reply must be one JSON edit block or one whole Argus program (argus/agent/prompt.py); it is parsed
and then verified and evaluated like any other candidate, never executed. An unreadable reply, a
program the verifier rejects, or one that does not compile goes back to the model in the same
conversation with the reason (the loop bounds the number of repairs per step).
"""

from __future__ import annotations

import os
from typing import Any

from argus.agent.planners.base import Attempt, PlannerContext, PlannerError, Proposal
from argus.agent.prompt import ReplyError, build_prompt, parse_reply, repair_prompt, system_prompt

DEFAULT_MODEL = "claude-sonnet-4-5"


class AnthropicPlanner:
    name = "anthropic"

    def __init__(self, model: str | None = None, client: Any = None, api_key: str | None = None,
                 base_url: str | None = None, max_tokens: int = 4096, timeout_s: float = 300.0):
        self.model = model or os.environ.get("ARGUS_ANTHROPIC_MODEL") or DEFAULT_MODEL
        self.max_tokens = max_tokens
        if client is None:
            key = api_key or os.environ.get("ANTHROPIC_API_KEY")
            if not key:
                raise PlannerError("the anthropic planner needs an API key: set ANTHROPIC_API_KEY, or run offline "
                                   "with --planner builtin")
            try:
                import anthropic
            except ImportError as e:
                raise PlannerError(f"the anthropic SDK is not installed ({e}); pip install anthropic, or use "
                                   "--planner builtin") from e
            kwargs: dict[str, Any] = {"api_key": key, "timeout": timeout_s, "max_retries": 2}
            if base_url:
                kwargs["base_url"] = base_url
            client = anthropic.Anthropic(**kwargs)
        self.client = client
        self._messages: list[dict[str, Any]] = []

    def _ask(self, messages: list[dict[str, Any]]) -> str:
        try:
            resp = self.client.messages.create(model=self.model, max_tokens=self.max_tokens, system=system_prompt(),
                                               messages=messages)
        except Exception as e:  # the SDK's APIError family, connection errors
            raise PlannerError(f"the Anthropic API call failed: {type(e).__name__}: {e}") from e
        return "".join(getattr(b, "text", "") for b in resp.content if getattr(b, "type", "") == "text")

    def _proposal(self, text: str, ctx: PlannerContext) -> Proposal:
        try:
            return parse_reply(text, ctx)
        except ReplyError as e:
            # Handed to the loop as an unusable proposal; it comes back through repair() with this reason.
            return Proposal(reasoning="", action="llm:unreadable", raw=text, meta={"parse_error": str(e)})

    def propose(self, ctx: PlannerContext) -> Proposal:
        self._messages = [{"role": "user", "content": build_prompt(ctx)}]
        text = self._ask(self._messages)
        self._messages.append({"role": "assistant", "content": text or "(empty reply)"})
        return self._proposal(text, ctx)

    def repair(self, ctx: PlannerContext, attempts: list[Attempt]) -> Proposal | None:
        if not self._messages:
            return None
        self._messages.append({"role": "user", "content": repair_prompt(attempts[-1])})
        text = self._ask(self._messages)
        self._messages.append({"role": "assistant", "content": text or "(empty reply)"})
        return self._proposal(text, ctx)
