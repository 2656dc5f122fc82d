"""IR kernel -> CUDA C++ -> NVRTC (disk-cached) -> cubin or PTX, with errors shown at `.arg` lines."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Literal

from argus.codegen.cache import compile_cached
from argus.codegen.emit import generate
from argus.codegen.nvrtc import CompileError, CompileResult, compile_cuda, detect_arch, normalize_arch
from argus.codegen.resources import KernelResources, kernel_resources
from argus.codegen.spec import GeneratedKernel
from argus.dsl.diagnostics import ArgusError, Diagnostic, Span
from argus.ir import nodes as ir
from argus.ir.transform import walk

DEFAULT_ARCH = "sm_90a"


@dataclass(frozen=True)
class Built:
    """A kernel compiled for one architecture: the IR it came from, the CUDA source, the binary."""

    kernel: ir.Kernel
    generated: GeneratedKernel
    result: CompileResult

    @property
    def arch(self) -> str:
        return self.result.arch

    @property
    def resources(self) -> dict[str, KernelResources]:
        return kernel_resources(self.result) if self.result.want == "cubin" else {}


def target_arch(arch: str | None) -> str:
    """`arch` normalised to sm_XX[a]; None: the GPU's, else sm_90a."""
    return normalize_arch(arch or detect_arch() or DEFAULT_ARCH, "cubin")


def _sm(arch: str) -> tuple[int, bool]:
    m = re.match(r"^(?:sm_|compute_)(\d+)([af]?)$", arch)
    assert m is not None
    return int(m.group(1)), m.group(2) == "a"


def _first_sm90_span(k: ir.Kernel) -> Span | None:
    for node in walk(k.body):
        if isinstance(node, ir.Mma) and node.instr == "wgmma":
            return node.span
        if isinstance(node, (ir.Copy, ir.AllocBarrier, ir.Role)) and (
                not isinstance(node, ir.Copy) or node.mode == "bulk"):
            return node.span
    return k.span


def check_arch(k: ir.Kernel, gen: GeneratedKernel, arch: str) -> None:
    sm, accel = _sm(arch)
    if gen.needs_sm90a and not (sm == 90 and accel):
        feats = ", ".join(sorted(gen.features & {"wgmma", "tma", "mbarrier", "setmaxnreg"}))
        raise ArgusError(Diagnostic(
            "error", "arch", f"this kernel uses sm_90a instructions ({feats}); it cannot be built for {arch}",
            _first_sm90_span(k), ("build with --arch sm_90a, or use instr=\"mma.sync\" and copy_async",)))


def _line_spans(k: ir.Kernel) -> dict[int, Span]:
    """The first statement span on each `.arg` line (to underline what a compiler message is about)."""
    out: dict[int, Span] = {}
    for node in walk(k.body):
        span = getattr(node, "span", None)
        if isinstance(node, ir.Stmt) and span is not None:
            out.setdefault(span.line, span)
    return out


def _same_file(a: str, b: str) -> bool:
    """NVRTC may print a #line path made absolute."""
    return a == b or a.endswith("/" + b.lstrip("./")) or b.endswith("/" + a.lstrip("./"))


def _directive_line(source: str, line: int) -> int:
    """The `.arg` line of the #line directive a compiler's presumed line `line` counts from: each
    generated line after `#line N` is presumed N + 1, N + 2, ..., so a message about the third CUDA line
    of a statement would otherwise point two lines past it (or past the end of the file)."""
    blocks, cur, count = [], None, 0
    for text in source.splitlines():
        if text.startswith("#line "):
            if cur is not None:
                blocks.append((cur, count))
            cur, count = int(text.split()[1]), 0
        elif cur is not None:
            count += 1
    if cur is not None:
        blocks.append((cur, count))
    hits = [n for n, c in blocks if n <= line < n + max(c, 1)]
    return max(hits) if hits else line


def to_argus_error(e: CompileError, k: ir.Kernel, gen: GeneratedKernel) -> ArgusError:
    """NVRTC / ptxas messages as Argus diagnostics at the `.arg` lines the #line directives name."""
    spans = _line_spans(k)
    diags: list[Diagnostic] = []
    for d in e.errors or ():
        if d.path is not None and _same_file(d.path, gen.path) and d.line is not None:
            line = _directive_line(gen.source, d.line)
            span = spans.get(line) or Span.point(gen.path, line, 1)
            diags.append(Diagnostic("error", "nvrtc", f"generated CUDA does not compile: {d.message}", span,
                                    ("this is a code generation bug; the CUDA source is shown by "
                                     "`argus build --emit cuda`",)))
        else:
            diags.append(Diagnostic("error", "nvrtc", f"{d}", None))
    if not diags:
        diags.append(Diagnostic("error", "nvrtc", e.message, k.span, (e.log[-2000:],) if e.log else ()))
    return ArgusError(diags)


def build(
    kernel: ir.Kernel,
    *,
    arch: str | None = None,
    want: Literal["cubin", "ptx"] = "cubin",
    path: str | None = None,
    cache: bool = True,
    isolate: bool = False,
    options: tuple[str, ...] = (),
    defer_wgmma: bool | None = None,
    blocks_per_sm: int | None = None,
    uniform_select: bool = True,
    bulk_store: bool | None = None,
    release_lag: bool | None = None,
) -> Built:
    """Generate CUDA for `kernel` and compile it; raises ArgusError (with `.arg` spans) on failure."""
    gen = generate(kernel, path, defer_wgmma=defer_wgmma, blocks_per_sm=blocks_per_sm, uniform_select=uniform_select,
                   bulk_store=bulk_store, release_lag=release_lag)
    target = target_arch(arch)
    check_arch(kernel, gen, target)
    compile_fn = compile_cached if cache else compile_cuda
    try:
        result = compile_fn(gen.source, name=gen.name, arch=target, want=want, isolate=isolate, options=options)
    except CompileError as e:
        if blocks_per_sm is None and kernel.blocks_per_sm is None \
                and "Insufficient registers" in (e.log or "") + e.message and "__launch_bounds__" in gen.source \
                and f"({kernel.threads}, 2)" in gen.source:
            # two blocks per SM capped registers below what an instruction needs: one block per SM
            return build(kernel, arch=arch, want=want, path=path, cache=cache, isolate=isolate, options=options,
                         defer_wgmma=defer_wgmma, blocks_per_sm=1, uniform_select=uniform_select,
                         bulk_store=bulk_store, release_lag=release_lag)
        raise to_argus_error(e, kernel, gen) from None
    built = Built(kernel, gen, dataclasses.replace(result, name=gen.name))
    if blocks_per_sm is None and kernel.blocks_per_sm is None and want == "cubin" \
            and f"({kernel.threads}, 2)" in gen.source and _spills(built):
        # two blocks per SM capped registers and ptxas spilled: a block with the registers it needs beats
        # two that go through local memory (a memory-bound row kernel keeps its rows in registers)
        one = build(kernel, arch=arch, want=want, path=path, cache=cache, isolate=isolate, options=options,
                    defer_wgmma=defer_wgmma, blocks_per_sm=1, uniform_select=uniform_select,
                    bulk_store=bulk_store, release_lag=release_lag)
        if not _spills(one):
            return one
    return built


def _spills(b: Built) -> bool:
    return any(r.spills for r in b.resources.values())
