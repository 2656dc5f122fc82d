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


def test_a_multi_step_conversation_uses_counterexamples_and_profile_advice(tmp_path, monkeypatch):
    """Three steps against canned replies: a program the static verifier refutes with a counterexample
    (replayed), repaired in the same conversation; an edit taken from the profile diagnosis; a program
    the front end rejects, repaired by an edit. What the model is shown at each turn is checked."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    src = naive_program()
    off_by_one = src.replace("copy_async(b_s[s], B[k * BK : +BK, bn * BN : +BN])",
                             "copy_async(b_s[s], B[(k + 1) * BK : +BK, bn * BN : +BN])")
    fixed = src.replace("param STAGES = 1", "param STAGES = 2")
    no_wait = src.replace("        wait_async(a_s[s], b_s[s])\n", "")
    replies = [
        f"Prefetch the next B tile early.\n```argus\n{off_by_one}```",
        "The counterexample says mma-contraction: A's k-axis 0 met B's k-axis 32, so B is read one BK ahead. "
        f"Restore the B offset and use two stages instead.\n```argus\n{fixed}```",
        'The diagnosis says mma-sync-on-hopper: switch to wgmma.\n```json\n{"edits": [{"op": "set_param", '
        '"name": "MMA", "value": "wgmma"}], "reasoning": "mma-sync-on-hopper"}\n```',
        f"Drop the wait; the ring covers it.\n```argus\n{no_wait}```",
        'The verifier needs the wait. Deepen the ring instead.\n```json\n{"edits": [{"op": "rewrite", "name": '
        '"stages", "args": {"delta": 1}}]}\n```',
    ]
    with h.FakeAnthropic(replies) as api:
        planner = AnthropicPlanner(model="test-model", base_url=api.url)
        res = tune(h.config(tmp_path / "conv", budget=3, verifier="auto", verify_timeout_s=120, max_repairs=1),
                   planner=planner)
    steps = [r for r in h.records(res.record) if r["kind"] == "step"]
    assert [s["status"] for s in steps] == ["ok", "ok", "ok", "ok"]
    assert [a["problem"] for a in steps[1]["attempts"]] == ["violated"]
    assert [a["problem"] for a in steps[3]["attempts"]] == ["violated"]
    assert steps[1]["verify"]["status"] == "verified" and steps[2]["reward"] > steps[1]["reward"] > 0
    reqs = [r["body"]["messages"] for r in api.requests]
    assert [len(m) for m in reqs] == [1, 3, 1, 1, 3]  # a repair continues its step's conversation
    # turn 2: the static verifier's counterexample and the interpreter's replay of it
    repair = reqs[1][-1]["content"]
    for part in ("rejected (violated)", "[mma-contraction]", "counterexample:", "B[k-axis 0]",
                 "replay: interpreter confirms"):
        assert part in repair, part
    # turn 3: a new step; the profile advice on the best kernel (mma.sync on Hopper) and the trajectory
    p2 = reqs[2][0]["content"]
    assert "## Profile diagnosis of the best kernel" in p2 and "[mma-sync-on-hopper]" in p2
    assert "| 1 | 0 | program: STAGES 1 -> 2 | ok |" in p2
    # turn 4: after wgmma the advice changed, and the failed attempt of step 1 is no longer a failure
    p3 = reqs[3][0]["content"]
    diag3 = p3[p3.index("## Profile diagnosis"): p3.index("## Trajectory")]
    assert "[mma-sync-on-hopper]" not in diag3 and "[smem-bound]" in diag3 and "-> wgmma, swizzle-128" in diag3
    assert "MMA=wgmma" in p3 and "## Contrastive pairs" in p3
    # turn 5: the front end's reason for refusing the program without a wait
    assert "[pipeline]" in reqs[4][-1]["content"] and "wait_async" in reqs[4][-1]["content"]
