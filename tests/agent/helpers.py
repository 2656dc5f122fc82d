"""Shared set-up for the agent tests: the naive GEMM start, fast shapes, stand-in backends, a fake API."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from argus.agent.backend import Compiled, CompileFailed, InterpBackend, Timing
from argus.agent.loop import TuneConfig
from tests.conftest import EXAMPLES

GEMM = EXAMPLES / "gemm.arg"
STARTS = EXAMPLES.parent / "benchmarks" / "tune" / "starts"  # the naive starts of the device run
NAIVE = {"BM": 64, "BN": 64, "BK": 32, "STAGES": 1, "MMA": "mma.sync", "SWIZZLE": 64}
CHECKS = ({"M": 64, "N": 64, "K": 64}, {"M": 72, "N": 40, "K": 56})  # small: fast in the interpreter


TARGETS = ({"M": 4096, "N": 4096, "K": 4096},)  # one target: each evaluation checks it by sampled blocks


def config(out: Path, budget: int = 4, **kw) -> TuneConfig:
    base = dict(file=str(GEMM), out_dir=str(out), budget=budget, params=dict(NAIVE), checks=CHECKS,
                verifier="interp", evaluator="model", hidden_shapes=1, scale_shapes=1, timeout_s=60.0,
                targets=TARGETS)
    base.update(kw)
    return TuneConfig(**base)


# ---- stand-in backends: each breaks the rules in one way (they run in the referee's child) ----
class WrongBackend(InterpBackend):
    """Computes, then perturbs one element: a wrong result."""

    def execute(self, compiled, arrays, dims, scalars, blocks=None):
        out = super().execute(compiled, arrays, dims, scalars, blocks)
        out["C"][0, 0] += 8.0
        return out


class UnwrittenBackend(InterpBackend):
    """Skips the last row of the output: those elements stay poisoned."""

    def execute(self, compiled, arrays, dims, scalars, blocks=None):
        keep = arrays["C"][-1:].copy()
        out = super().execute(compiled, arrays, dims, scalars, blocks)
        out["C"][-1:] = keep
        return out


class TamperBackend(InterpBackend):
    """Zeros its inputs and its output, hoping the reference is computed from the tampered inputs."""

    def execute(self, compiled, arrays, dims, scalars, blocks=None):
        arrays["A"][...] = 0
        arrays["B"][...] = 0
        arrays["C"][...] = 0
        return {"C": arrays["C"]}


class ShownShapesOnlyBackend(InterpBackend):
    """Correct only at the shapes the planner was shown (a kernel tuned to its test set)."""

    def execute(self, compiled, arrays, dims, scalars, blocks=None):
        out = super().execute(compiled, arrays, dims, scalars, blocks)
        if dims not in [dict(s) for s in CHECKS]:
            out["C"][...] = 0
        return out


class HangBackend(InterpBackend):
    def execute(self, compiled, arrays, dims, scalars, blocks=None):
        time.sleep(3600)
        return {}


class FaultBackend(InterpBackend):
    def execute(self, compiled, arrays, dims, scalars, blocks=None):
        os.abort()


class TooFastBackend(InterpBackend):
    """Reports a time below the speed-of-light floor (a broken timer, or a kernel that skipped work)."""

    def time(self, compiled, dims, *, seed, reps, input_sets):
        return Timing((1e-9,) * reps, None, False, {})


class NoCompileBackend(InterpBackend):
    def compile(self, source, defines, kernel) -> Compiled:
        raise CompileFailed("ptxas: too many resources requested for launch", {"registers": 300})


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return w, h


def records(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


# ---- a local stand-in for the Anthropic Messages API (127.0.0.1 only) ----
class FakeAnthropic:
    """Serves recorded replies, in order, to POST /v1/messages; keeps every request body."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                n = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                auth = self.headers.get("authorization", "")  # SDK versions differ: x-api-key or a bearer token
                key = self.headers.get("x-api-key") or (auth[7:] if auth.lower().startswith("bearer ") else None)
                fake.requests.append({"path": self.path, "body": body, "key": key})
                if not fake.replies:
                    self.send_response(500)
                    self.end_headers()
                    return
                text = fake.replies.pop(0)
                payload = json.dumps({
                    "id": f"msg_{len(fake.requests)}", "type": "message", "role": "assistant",
                    "model": body.get("model", "test"), "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn", "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 10}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def gemm_variant(*pairs: tuple[str, str]) -> str:
    src = GEMM.read_text()
    for old, new in pairs:
        assert old in src
        src = src.replace(old, new)
    return src
