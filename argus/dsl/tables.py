"""The parser's LALR tables: built from the grammar, or read back from a per-user JSON cache.

Building the tables costs ~90 ms per process; reading them back ~25 ms. Lark's own `cache=True`
keeps a pickle at a predictable path in the shared temp directory and unpickles it before checking
anything, so whoever can write that directory runs code in every `argus` process. Here the cache is:

- JSON, so a forged file can at worst describe a wrong parser, never run code;
- in the per-user cache directory (argus.files.PrivateDir: mode 0700, owned by the user, no
  symlinks followed), named by a key that hashes the grammar text, the Lark version and this format;
- self-checking: the file stores its key and a sha256 of its payload, both compared before use.

Anything unexpected (a missing, torn, foreign or unreadable entry, or a directory that is not
private) means the tables are built from the grammar as if there were no cache.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import lark
from lark import Lark

from argus.files import PrivateDir, UnsafeDir, cache_root

FORMAT = 1
MAX_ENTRY_BYTES = 8 << 20
_OPTIONS_NOT_STORED = ("postlex",)  # an object; passed again when loading


def _key(grammar: str, options: dict[str, Any]) -> str:
    text = json.dumps({"format": FORMAT, "lark": lark.__version__, "grammar": grammar,
                       "options": sorted((k, repr(v)) for k, v in options.items() if k not in _OPTIONS_NOT_STORED)})
    return hashlib.sha256(text.encode()).hexdigest()


def _encode(x: Any) -> Any:
    """Lark's serialised tables as JSON: dicts with non-string keys and tuples are tagged."""
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x):
            return {k: _encode(v) for k, v in x.items()}
        return {"__pairs__": [[_encode(k), _encode(v)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v) for v in x]}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    raise TypeError(f"cannot store a {type(x).__name__} in the grammar cache")


def _decode(x: Any) -> Any:
    if isinstance(x, dict):
        if len(x) == 1 and "__pairs__" in x:
            return {_decode(k): _decode(v) for k, v in x["__pairs__"]}
        if len(x) == 1 and "__tuple__" in x:
            return tuple(_decode(v) for v in x["__tuple__"])
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x


def _serialise(parser: Lark, key: str) -> bytes:
    data, memo = parser.memo_serialize([lark.lexer.TerminalDef, lark.grammar.Rule])
    data["options"] = {k: v for k, v in data["options"].items() if k not in _OPTIONS_NOT_STORED}
    payload = json.dumps(_encode({"data": data, "memo": memo}), sort_keys=True)
    return json.dumps({"key": key, "sha256": hashlib.sha256(payload.encode()).hexdigest(),
                       "payload": payload}).encode()


def _deserialise(raw: bytes, key: str, loaded: dict[str, Any]) -> Lark | None:
    try:
        entry = json.loads(raw)
        payload = entry["payload"]
        if entry.get("key") != key or hashlib.sha256(payload.encode()).hexdigest() != entry.get("sha256"):
            return None
        return Lark.__new__(Lark)._load(_decode(json.loads(payload)), **loaded)
    except Exception:  # a damaged entry of any shape: build instead
        return None


def cache_name(key: str) -> str:
    return f"lalr-{key[:32]}.json"


def load_parser(grammar: str, **options: Any) -> Lark:
    """An LALR parser for `grammar` (Lark options as keyword arguments, `postlex` included)."""
    key = _key(grammar, options)
    loaded = {k: v for k, v in options.items() if k in _OPTIONS_NOT_STORED}
    try:
        with PrivateDir.open(cache_root() / "grammar") as d:
            raw = d.read(cache_name(key), MAX_ENTRY_BYTES)
            parser = _deserialise(raw, key, loaded) if raw is not None else None
            if parser is not None:
                return parser
            parser = Lark(grammar, parser="lalr", **options)
            try:
                d.write(cache_name(key), _serialise(parser, key))
            except (OSError, TypeError):
                pass  # a full disk or an unexpected table shape only costs the next start-up time
            return parser
    except (UnsafeDir, OSError):
        return Lark(grammar, parser="lalr", **options)
