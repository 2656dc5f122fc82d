"""argus.files: program files are regular files, outputs never go through links, caches are private."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from argus.dsl.diagnostics import ArgusError, render
from argus.files import PrivateDir, UnsafeDir, read_source, write_output


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "kernel.arg"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(ArgusError, match="FIFO"):
        read_source(fifo)
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("path,kind", [("/dev/zero", "character device"), ("/", "directory")])
def test_devices_and_directories_are_refused(path: str, kind: str) -> None:
    with pytest.raises(ArgusError, match=kind):
        read_source(path)


def test_size_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.arg"
    big.write_bytes(b"#" * 2000)
    with pytest.raises(ArgusError, match="at most 1000 bytes"):
        read_source(big, limit=1000)


def test_non_utf8_is_a_located_error(tmp_path: Path) -> None:
    f = tmp_path / "bad.arg"
    f.write_bytes(b"kernel k():\n    x = 1 \xff\xfe\n")
    with pytest.raises(ArgusError) as e:
        read_source(f)
    d = e.value.diagnostics[0]
    assert d.code == "encoding" and (d.span.line, d.span.col) == (2, 11) and "0xff" in d.message
    assert "x = 1" in render(d)


def test_write_output_refuses_links_existing_files_and_missing_folders(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me")
    link = tmp_path / "out.cubin"
    link.symlink_to(target)
    for force in (False, True):
        with pytest.raises(ArgusError, match="symbolic link"):
            write_output(link, b"data", force=force)
    assert target.read_text() == "keep me"
    out = tmp_path / "a.cubin"
    write_output(out, b"one")
    with pytest.raises(ArgusError, match="refusing to overwrite") as e:
        write_output(out, b"two")
    assert "--force" in e.value.diagnostics[0].notes[0]
    write_output(out, b"two", force=True)
    assert out.read_bytes() == b"two"
    with pytest.raises(ArgusError, match="does not exist"):
        write_output(tmp_path / "missing" / "a.cubin", b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.cubin", "out.cubin", "precious"]  # no temp files left
    assert write_output(os.devnull, b"streams are written in place", force=False) == Path(os.devnull)
    assert Path(os.devnull).is_char_device()


def test_private_dir_is_created_0700_and_refuses_links(tmp_path: Path) -> None:
    with PrivateDir.open(tmp_path / "c") as d:
        d.write("x.json", b"{}")
        assert d.read("x.json", 100) == b"{}" and d.read("x.json", 1) is None and d.read("nope", 100) is None
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "c" / "x.json").stat().st_mode & 0o777 == 0o600
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeDir):
        PrivateDir.open(tmp_path / "link")
    secret = tmp_path / "secret"
    secret.write_text("s")
    (tmp_path / "c" / "y.json").symlink_to(secret)
    with PrivateDir.open(tmp_path / "c") as d:
        assert d.read("y.json", 100) is None  # a planted link inside is not followed


@pytest.mark.skipif(os.getuid() != 0, reason="changing a directory's owner needs root")
def test_private_dir_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 12345, 12345)
    with pytest.raises(UnsafeDir, match="another user"):
        PrivateDir.open(d)


def test_private_dir_writes_are_atomic_under_concurrency(tmp_path: Path) -> None:
    """Readers see either nothing or a whole entry, never a torn one."""
    payloads = [bytes([i]) * 200_000 for i in range(4)]
    seen: list[bytes | None] = []

    def writer() -> None:
        for p in payloads * 5:
            with PrivateDir.open(tmp_path / "c") as d:
                d.write("e.bin", p)

    th = threading.Thread(target=writer)
    th.start()
    while th.is_alive():
        with PrivateDir.open(tmp_path / "c") as d:
            seen.append(d.read("e.bin", 1 << 20))
    th.join()
    assert all(s is None or s in payloads for s in seen)
