"""File access that a planted file, a FIFO or a symlink cannot subvert.

- `read_source`: a program file is read only if it is a regular file below a size limit (a FIFO or a
  device is refused instead of blocking or streaming forever), and bytes that are not UTF-8 are a
  located error.
- `write_output`: an artefact is written through a temporary file and `os.replace`, never through a
  symlink, and an existing file is replaced only with `force`.
- `PrivateDir`: a per-user cache directory (mode 0700, owned by the user, not a symlink), checked
  every time it is opened; files in it are opened relative to the checked directory's descriptor with
  O_NOFOLLOW and must be regular files owned by the user, so nothing another user could plant (or
  redirect with a symlink) is ever read or written.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from argus.dsl.diagnostics import SOURCES, Span, error

MAX_SOURCE_BYTES = 4 << 20  # a program file; the largest example is ~20 KB
CACHE_ENV = "ARGUS_CACHE_DIR"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; ArgusError (code "io") otherwise.

    Opened non-blocking so that a FIFO without a writer cannot stall the open; its type is then
    checked on the open descriptor (no window between the check and the read)."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise error("io", f"cannot read {p}: {exc.strerror or exc}", None) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error("io", f"cannot read {p}: it is {_kind(st.st_mode)}, not a regular {what}", None,
                        f"give the path of a {what}")
        if st.st_size > limit:
            raise error("io", f"{p} is {st.st_size} bytes; a {what} may be at most {limit} bytes", None)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:  # grew while being read
                raise error("io", f"{p} is more than {limit} bytes; a {what} may be at most {limit} bytes", None)
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise error("io", f"cannot read {p}: {exc.strerror or exc}", None) from None
    finally:
        os.close(fd)


def decode_source(data: bytes, path: str) -> str:
    """UTF-8 text, or a located error at the first byte that is not UTF-8."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        pos = exc.start
        line = data.count(b"\n", 0, pos) + 1
        start = data.rfind(b"\n", 0, pos) + 1
        col = len(data[start:pos].decode("utf-8", errors="replace")) + 1
        SOURCES.add(path, data.decode("utf-8", errors="replace"))  # so the line can be quoted
        raise error("encoding", f"the file is not UTF-8 text: byte 0x{data[pos]:02x} cannot be decoded",
                    Span(path, line, col, line, col + 1), "save the file as UTF-8") from None


def read_source(path: str | Path, limit: int = MAX_SOURCE_BYTES) -> str:
    return decode_source(read_regular(path, limit, "source file"), str(path))


def check_output(path: str | Path, *, force: bool = False) -> Path:
    """Refuse (ArgusError "io") an output path that `write_output` would refuse: checked before the
    work that produces the data, so a long compile is not wasted."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise error("io", f"cannot write {p}: the folder {parent} does not exist", None,
                    "create it first or choose another -o path")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise error("io", f"refusing to write {p}: it is a symbolic link", None,
                        "remove the link or choose another -o path (links are never followed)")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            return p  # a stream such as /dev/null: written in place, never replaced
        if not stat.S_ISREG(st.st_mode):
            raise error("io", f"refusing to write {p}: it is {_kind(st.st_mode)}", None)
        if not force:
            raise error("io", f"refusing to overwrite {p}", None, "pass --force to replace it")
    return p


def write_output(path: str | Path, data: bytes, *, force: bool = False) -> Path:
    """Write `data` to `path` atomically. Refuses a symlink (even with `force`), anything that is not
    a regular file, an existing file without `force`, and a missing parent folder."""
    p = check_output(path, force=force)
    if p.exists() and not p.is_file():  # a character device or a FIFO: stream into it
        try:
            fd = os.open(p, os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise error("io", f"cannot write {p}: {exc.strerror or exc}", None) from None
        return p
    tmp = p.parent / f".{p.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)  # replaces a link that appeared meanwhile, never writes through it
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise error("io", f"cannot write {p}: {exc.strerror or exc}", None) from None
    return p


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "argus"


class UnsafeDir(OSError):
    """The cache directory is not private to this user (or not a directory)."""


class PrivateDir:
    """A directory only this user can write, opened by descriptor so later path tricks do not apply.

    Use as a context manager: `with PrivateDir.open(root / "nvrtc") as d: d.read(name, limit)`.
    """

    def __init__(self, path: Path, fd: int):
        self.path = path
        self.fd = fd

    @staticmethod
    def open(path: str | Path, create: bool = True) -> PrivateDir:
        p = Path(path)
        if create:
            try:
                p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.mkdir(p, 0o700)
            except FileExistsError:
                pass
        try:
            fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise UnsafeDir(f"{p}: {exc.strerror or exc} (a symbolic link or not a directory)") from None
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            os.close(fd)
            raise UnsafeDir(f"{p} belongs to another user (uid {st.st_uid})")
        if st.st_mode & 0o077:
            try:  # ours, but readable or writable by others: tighten it rather than trust it
                os.fchmod(fd, 0o700)
            except OSError as exc:
                os.close(fd)
                raise UnsafeDir(f"{p} is accessible to other users and cannot be made private: {exc}") from None
        return PrivateDir(p, fd)

    def __enter__(self) -> PrivateDir:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def read(self, name: str, limit: int) -> bytes | None:
        """The contents of `name`, or None when it is absent, not a regular file of ours, or too big."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=self.fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 \
                    or st.st_size > limit:
                return None
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(limit + 1)
            return data if len(data) <= limit else None
        except OSError:
            return None
        finally:
            os.close(fd)

    def write(self, name: str, data: bytes) -> None:
        """Atomically (a temporary file in the same directory, then rename): readers see all or nothing."""
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            raise

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))
