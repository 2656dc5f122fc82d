"""`argus run FILE --kernel LAYER`: an executable layer (argus/layers.py) run on fresh random inputs in the
interpreter (--interp) or on the GPU (--gpu, --bench), its outputs compared with its reference block in
float64 by the interpreter's criterion (argus.interp.run.compare), as `argus run` does for a kernel."""

from __future__ import annotations

import json
import time

import numpy as np

from argus.dsl.diagnostics import error
from argus.dsl.reference import evaluate_reference
from argus.dsl.types import DTYPES
from argus.interp.numerics import poison, random_ints, round_to, storage_dtype
from argus.interp.run import compare
from argus.layers import Layer, layer_params, outputs_of


def _inputs(layer: Layer, dims: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Fresh inputs rounded to their dtype (never zeros); outputs poisoned with NaN (or -1)."""
    outs = outputs_of(layer.node.reference)
    arrays = {}
    for a in layer.node.args:
        if a.dims is None:
            continue
        shape = tuple(dims[d] if isinstance(d, str) else d for d in a.dims)
        dt = DTYPES[a.dtype]
        if a.name in outs:
            arrays[a.name] = np.full(shape, poison(dt), storage_dtype(dt))
        elif dt.is_float:
            arrays[a.name] = round_to(rng.standard_normal(shape), dt)
        else:
            arrays[a.name] = random_ints(dt, shape, rng)
    return arrays


def run_layer(file: str, layer: Layer, defines: dict[str, object], *, gpu: bool, bench: bool = False,
              seed: int | None = None, iters: int = 30, fmt: str = "text") -> int:
    names = list(dict.fromkeys(d for a in layer.node.args for d in a.dims or () if isinstance(d, str)))
    known = set(names) | {a.name for a in layer.node.args if a.dims is None} | set(layer_params(layer.node, {}))
    unknown = [n for n in defines if n not in known]
    if unknown:
        raise error("unknown-define", f"-D {unknown[0]}: layer '{layer.name}' has no param, dimension or scalar of "
                    "that name", layer.node.name_span, "it has: " + ", ".join(sorted(known)))
    missing = [d for d in names if d not in defines]
    if missing:
        raise error("missing-dim", f"no value for dimension{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
                    layer.node.name_span, "give every dimension with -D, e.g. " +
                    " ".join(f"-D {d}=256" for d in missing))
    dims = {d: int(defines[d]) for d in names}  # type: ignore[call-overload]
    if any(v < 1 for v in dims.values()):
        raise error("bad-define", "every dimension must be at least 1", layer.node.name_span)
    from argus.ir.lower import const_default

    # scalars from -D, else their declared defaults (the reference reads them as well)
    scalars = {a.name: defines[a.name] if a.name in defines else const_default(a)
               for a in layer.node.args if a.dims is None and (a.name in defines or a.default is not None)}
    arrays = _inputs(layer, dims, np.random.default_rng(seed))
    env = {n: x.astype(np.float64) for n, x in arrays.items()}
    env.update(dims)
    env.update(layer_params(layer.node, layer.params))
    env.update(scalars)
    outs = [a.name for a in layer.node.args if a.name in outputs_of(layer.node.reference)]
    t0 = time.perf_counter()
    timing = None
    if gpu:
        import torch

        from argus.runtime.bench import time_interleaved, to_device, to_host

        dev = {n: to_device(x, next(a.dtype for a in layer.node.args if a.name == n)) for n, x in arrays.items()}
        launch = layer.prepare(**dev, **scalars)
        launch()
        torch.cuda.synchronize()
        got = {o: to_host(dev[o]) for o in outs}
        if bench:
            timing = time_interleaved({"argus": [launch]}, iters)["argus"]
    else:
        layer(**arrays, **scalars)
        got = {o: arrays[o] for o in outs}
    seconds = time.perf_counter() - t0
    want = evaluate_reference(layer.node.reference, env)
    dtype = {a.name: DTYPES[a.dtype] for a in layer.node.args}
    checks = [compare(o, got[o], want[o], dtype[o]) for o in outs]
    ok = all(c.ok for c in checks)
    where = "gpu" if gpu else "interp"
    if fmt == "json":
        from argus.records import run_record

        t = None if timing is None else {"time_ms": timing.median_ms, "min_ms": timing.min_ms,
                                         "max_ms": timing.max_ms, "samples": timing.samples, "baseline": None,
                                         "baseline_ms": None, "ratio": None, "tflops": None}
        print(json.dumps(run_record(file, layer.name, where, ok, dims, None if gpu else seconds, checks, None, t),
                         indent=2))
    else:
        shown = " ".join(f"{d}={v}" for d, v in dims.items())
        print(f"{file}: layer '{layer.name}' {shown} ({'GPU' if gpu else 'interpreter'}, "
              f"{len(layer.plan.calls)} calls)")
        for c in checks:
            print(f"  {'ok  ' if c.ok else 'FAIL'} {c.describe()}")
        if timing is not None:
            print(f"  argus   {timing.median_ms:8.4f} ms  (median of {timing.samples}, min {timing.min_ms:.4f}, "
                  f"max {timing.max_ms:.4f}; no library baseline for a layer)")
    return 0 if ok else 1
