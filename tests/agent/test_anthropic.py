"""The Anthropic planner through the real SDK, against a local fake of the Messages API (127.0.0.1)."""

from __future__ import annotations

import json

import pytest

from argus.agent.loop import tune
from argus.agent.planners import PlannerError
from argus.agent.planners.anthropic_planner import AnthropicPlanner
from argus.agent.program import Candidate
from argus.cli import main
from tests.agent import helpers as h


def naive_program() -> str:
    return Candidate.make(h.GEMM.read_text(), dict(h.NAIVE)).materialise()


def replies() -> list[str]:
    src = naive_program()
    unwritten = src.replace("grid=(cdiv(M, BM), cdiv(N, BN))", "grid=(M // BM, cdiv(N, BN))")
    broken = src.replace("acc = zeros(f32[BM, BN])", "acc = zeros(f32[BM, BN]")
    better = src.replace('param MMA = "mma.sync"', 'param MMA = "wgmma"').replace("param BM = 64", "param BM = 128")
    return [
        # step 1: an unreadable edit, then a program that leaves output rows unwritten, then a good edit
        'Deeper pipeline.\n```json\n{"edits": [{"op": "set_param", "name": "STAGES"\n```',
        f"Launch one block fewer per column (it is wasted).\n```argus\n{unwritten}```",
        '```json\n{"edits": [{"op": "set_param", "name": "STAGES", "value": 3}], "reasoning": "hide latency"}\n```',
        # step 2: a program that does not parse, then a good one
        f"```argus\n{broken}```",
        f"Use wgmma with 64-row slabs per warpgroup.\n```argus\n{better}```",
    ]


def test_anthropic_planner_through_the_sdk(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    with h.FakeAnthropic(replies()) as api:
        planner = AnthropicPlanner(model="test-model", base_url=api.url)
        res = tune(h.config(tmp_path / "llm", budget=2), planner=planner)
    steps = [r for r in h.records(res.record) if r["kind"] == "step"]
    assert [s["status"] for s in steps] == ["ok", "ok", "ok"]
    assert [a["problem"] for a in steps[1]["attempts"]] == ["invalid", "violated"]
    assert [a["problem"] for a in steps[2]["attempts"]] == ["violated"]
    assert "could not read the reply" in steps[1]["attempts"][0]["message"]
    assert "unwritten" in steps[1]["attempts"][1]["message"]
    assert "[syntax]" in steps[2]["attempts"][0]["message"]
    assert Candidate.from_json(steps[1]["candidate"]).effective_params()["STAGES"] == 3
    assert steps[2]["reward"] > steps[1]["reward"] > 0
    assert steps[2]["proposal"]["source"] and "wgmma" in steps[2]["proposal"]["raw"]

    reqs = api.requests
    assert len(reqs) == 5 and all(r["path"] == "/v1/messages" and r["key"] == "sk-test-not-a-key" for r in reqs)
    first = reqs[0]["body"]
    assert first["model"] == "test-model" and "EXACTLY ONE fenced block" in first["system"]
    prompt = first["messages"][0]["content"]
    for part in ("## Best kernel", "```argus", "## Profile diagnosis", "mma-sync-on-hopper", "## Trajectory",
                 "## Knowledge base", "wgmma"):
        assert part in prompt
    # Repairs continue the conversation with the reason: the parse error, then the counterexample.
    assert [m["role"] for m in reqs[1]["body"]["messages"]] == ["user", "assistant", "user"]
    assert "rejected (invalid)" in reqs[1]["body"]["messages"][-1]["content"]
    assert "unwritten" in reqs[2]["body"]["messages"][-1]["content"]
    # Step 2's prompt has the trajectory of step 1 and a contrastive pair.
    p2 = reqs[3]["body"]["messages"][0]["content"]
    assert "## Contrastive pairs" in p2 and "FAST step 1" in p2 and "STAGES=3" in p2
    assert "## Recent failures" not in p2 or "unwritten" in p2


def test_missing_key_names_the_builtin_planner(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(PlannerError, match="--planner builtin"):
        AnthropicPlanner()
    rc = main(["tune", str(h.GEMM), "--planner", "anthropic", "--budget", "1", "--out", str(tmp_path / "x"),
               "--evaluator", "model"])
    assert rc == 1 and "--planner builtin" in capsys.readouterr().err


def test_reply_parser_accepts_only_data(tmp_path):
    from argus.agent.loop import Tuner
    from argus.agent.prompt import ReplyError, parse_reply

    t = Tuner(h.config(tmp_path / "p", budget=0))
    t.run()
    ctx = t.context(1)
    p = parse_reply('```json\n{"parent_step": 0, "edits": [{"op": "rewrite", "name": "stages", "args": '
                    '{"delta": 1}}]}\n```', ctx)
    assert p.parent == t.start.key and p.edits[0].name == "stages"
    for bad, why in [("```python\nimport os\nos.system('x')\n```", "no ```json```"),
                     ('```json\n{"op": "exec", "code": "1"}\n```', "bad edit"),
                     ('```json\n{"parent_step": 7, "edits": []}\n```', "parent_step 7"),
                     ("```argus\nprint(1)\n```", "not a kernel program"),
                     ('```json\n{}\n```\n```json\n{}\n```', "more than one block")]:
        with pytest.raises(ReplyError, match=why):
            parse_reply(bad, ctx)
    assert json.loads(json.dumps(p.to_json()))["edits"][0]["op"] == "rewrite"
