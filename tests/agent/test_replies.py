"""Hostile model replies through the real SDK path: each costs one step with a reason, none crashes,
hangs or reaches the terminal or the report unescaped."""

from __future__ import annotations

import re

from argus.agent.loop import tune
from argus.agent.planners.anthropic_planner import AnthropicPlanner
from tests.agent import helpers as h

HEADER = "kernel gemm(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N]):\n    launch grid=(cdiv(M, 64), cdiv(N, 64)), " \
         "threads=128\n"
REFERENCE = "reference:\n    C = A @ B\n"


def program(body: str) -> str:
    return f"```argus\n{HEADER}{body}{REFERENCE}```"


def test_hostile_replies_cost_one_step_each(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    replies = [
        '```json\n{"edits": [{"op": "set_param", "name": "BM", "value": ' + "9" * 5001 + "}]}\n```",
        '```json\n' + "[" * 10_000 + "]" * 10_000 + "\n```",
        program("    x = " + " + ".join(["1"] * 600) + "\n"),
        program("    x = zeros(f32[40000, 40000])\n    store(C[0 : +40000, 0 : +40000], cast(x, bf16))\n"),
        program("    for i in range(2000000000):\n        pass\n"
                "    store(C[0 : +64, 0 : +64], cast(zeros(f32[64, 64]), bf16))\n"),
        "x" * 300_000,
        "\x1b[2J\x1b]0;owned\x07<script>alert(1)</script> | cell\n"
        '```json\n{"edits": [{"op": "set_param", "name": "STAGES", "value": 2}], '
        '"reasoning": "\\u001b[31m<img src=x onerror=alert(1)>|"}\n```',
    ]
    lines: list[str] = []
    with h.FakeAnthropic(replies) as api:
        planner = AnthropicPlanner(model="test-model", base_url=api.url)
        res = tune(h.config(tmp_path / "hostile", budget=len(replies), max_repairs=0, timeout_s=8.0),
                   planner=planner, progress=lines.append)
    steps = [r for r in h.records(res.record) if r["kind"] == "step"][1:]
    why = [s["attempts"][-1]["message"] if s["attempts"] else "" for s in steps]
    assert [s["status"] for s in steps] == ["invalid", "invalid", "violated", "violated", "violated", "invalid",
                                            "ok"], why
    assert "cannot be read" in why[0] and "cannot be read" in why[1]
    assert "nested more than" in why[2]
    assert "too-large" in why[3] or "shared" in why[3]
    assert "limit" in why[4] and "time limit" in why[4]
    assert "characters" in why[5]
    # nothing from the replies reaches the terminal as a control sequence
    assert not any(re.search("[\x00-\x08\x0b-\x1f\x7f]", ln) for ln in lines)
    report = res.report.read_text()
    assert "<script>" not in report and "<img" not in report and "\x1b" not in report
    for row in (ln for ln in report.splitlines() if ln.startswith("| ") and ln[2:3].isdigit()):
        assert len(re.findall(r"(?<!\\)\|", row)) in (6, 9), row  # no cell split by an unescaped '|'
