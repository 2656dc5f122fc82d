"""`argus tune`: an in-context reinforcement-learning loop that optimises Argus kernels.

Modules, in the order a step uses them:
  program.py / rewrites.py / source.py   candidates (source + param overrides) and edits as JSON data
  planners/                               builtin (MCTS over the knowledge base) and anthropic (Claude)
  gate.py / verify.py                     build, interface check, static verifier hook, small-shape replay
  referee.py / backend.py / isolate.py    correctness and timing in a child process, cheat-proof
  costmodel.py / features.py / hardware.py / workload.py   CPU-mode estimates and the roofline floor
  advice.py / kb.py / knowledge/          profile diagnoses naming knowledge-base techniques
  loop.py / record.py / report.py / png.py / cli.py        the loop, its resumable record, outputs

Plug points for the other components:
  * static verifier: `argus.analysis.verify(kernel_ir)` returning an object or dict with `status`
    ("verified" | "violated" | "unknown") and `findings` (each with `code` or `check`, `message`,
    `counterexample` (str, dict or an object with to_json()), optional `replay`, `status`, `span`).
    `argus.agent.verify.verify(kernel_ir) -> VerifyOutcome` is the tuner's side of it.
  * GPU execution: any object implementing `argus.agent.backend.Backend` (compile / execute / time);
    `RuntimeBackend` drives argus.codegen + argus.runtime today.
"""
