"""benchmarks/RESULTS.md holds one section per benchmark (GEMM, attention, MoE), each between markers
`<!-- section:NAME -->` and `<!-- /section:NAME -->`, so a benchmark rewrites its own section only."""

from __future__ import annotations

from pathlib import Path

ORDER = ("gemm", "attention", "moe")  # where a section that is not there yet goes


def update_section(path: Path, name: str, markdown: str) -> None:
    """Replace section `name` of `path` with `markdown` (or insert it in ORDER position)."""
    text = path.read_text() if path.exists() else ""
    start, end = f"<!-- section:{name} -->", f"<!-- /section:{name} -->"
    block = f"{start}\n{markdown.rstrip()}\n{end}\n"
    if start in text and end in text:
        a, b = text.index(start), text.index(end) + len(end)
        text = text[:a] + block.rstrip("\n") + text[b:]
    else:
        later = [n for n in ORDER[ORDER.index(name) + 1:] if f"<!-- section:{n} -->" in text] if name in ORDER else []
        if later:
            a = text.index(f"<!-- section:{later[0]} -->")
            text = text[:a] + block + "\n" + text[a:]
        else:
            text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block
    path.write_text(text)
