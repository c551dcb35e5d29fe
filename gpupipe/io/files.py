"""Finding input files and reading their bytes, compressed or not, without losing data silently."""

from __future__ import annotations

import glob
import os
import zlib
from pathlib import Path

from gpupipe.errors import InputError

CHUNK = 1 << 22


def expand_paths(patterns: str | list[str], *, suffixes: tuple[str, ...] | None = None,
                 not_files: list | None = None) -> list[str]:
    """Expand globs (``**`` allowed) and directories into a sorted, de-duplicated file list.

    Raises `InputError` naming the pattern when it matches nothing. Matches that cannot be read
    as files (a broken symlink, a FIFO or socket, a directory whose name a glob matched) are
    left out; with ``not_files`` given, each is appended to it as ``(path, why)``.
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    found: list[str] = []
    odd: list[tuple[str, str]] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        if os.path.isdir(pattern):
            candidates = [str(p) for p in sorted(Path(pattern).rglob("*"))
                          if suffixes is None or p.name.lower().endswith(suffixes)]
            candidates = [c for c in candidates if not os.path.isdir(c)]
        elif glob.has_magic(pattern):
            # a directory a glob matches is reported only when its name looks like a data file
            candidates = [c for c in sorted(glob.glob(pattern, recursive=True))
                          if not os.path.isdir(c) or (suffixes is not None
                                                      and c.lower().endswith(suffixes))]
        else:
            candidates = [pattern] if os.path.lexists(pattern) else []
        matches = []
        for c in candidates:
            why = _not_a_file(c)
            if why is None:
                matches.append(c)
            else:
                odd.append((os.path.normpath(c), why))
        if not candidates:
            raise InputError(
                f"input path {pattern!r} matches no file (relative paths are resolved from "
                f"{os.getcwd()}); check input.path"
            )
        found.extend(matches)
    if not_files is not None:
        not_files.extend(sorted(set(odd)))
    return sorted(dict.fromkeys(os.path.normpath(p) for p in found))


def _not_a_file(path: str) -> str | None:
    """Why ``path`` cannot be read as an input file, or None when it can."""
    import stat

    if os.path.islink(path) and not os.path.exists(path):
        return f"a broken symbolic link (to {os.readlink(path)!r})"
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if not stat.S_ISREG(mode):
        return "not a regular file (a socket or device)"
    return None


def common_root(paths: list[str]) -> str:
    """The deepest directory containing every path (ids derived from file names are relative to it)."""
    if not paths:
        return "."
    dirs = [os.path.dirname(os.path.abspath(p)) for p in paths]
    return os.path.commonpath(dirs)


def derived_id_prefix(path: str, root: str) -> str:
    """``<path relative to root>:``, the prefix of the ids derived for a file without an id
    column (``<file>:<line>``, ``<file>:<row>``)."""
    return os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/") + ":"


def compression_of(path: str) -> str | None:
    name = path.lower()
    if name.endswith(".gz"):
        return "gzip"
    if name.endswith((".zst", ".zstd")):
        return "zstd"
    return None


def read_bytes(path: str) -> tuple[bytes, str | None]:
    """The decompressed content of ``path`` and, if the file is corrupt or truncated, why.

    What could be decompressed before the damage is returned, so a ``skip`` policy keeps every
    complete record that precedes it.
    """
    kind = compression_of(path)
    try:
        if kind is None:
            with open(path, "rb") as f:
                return f.read(), None
        if kind == "gzip":
            return _read_frames(path, lambda: zlib.decompressobj(wbits=31), zlib.error)
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        return _read_frames(path, dctx.decompressobj, zstandard.ZstdError)
    except OSError as e:  # unreadable file: permissions, vanished, I/O error
        raise InputError(f"{path}: cannot read the file ({e})") from e


def _read_frames(path: str, new_decompressor, errors) -> tuple[bytes, str | None]:
    """Decompress every gzip member / zstd frame; on damage, keep what came out before it.

    A stream that just stops (a truncated download) is reported too: the last member never
    reaches its end marker.
    """
    parts: list[bytes] = []
    error = None
    d, fed = new_decompressor(), False
    with open(path, "rb") as f:
        while error is None:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            while chunk:
                try:
                    parts.append(d.decompress(chunk))
                    fed = True
                except errors as e:
                    error = f"{type(e).__name__}: {e}"
                    break
                if d.eof:  # concatenated members (`cat a.gz b.gz`); NUL padding is allowed
                    chunk = d.unused_data.lstrip(b"\x00")
                    d, fed = new_decompressor(), False
                else:
                    chunk = b""
    if error is None and fed and not d.eof:
        error = "unexpected end of file: the stream stops before its end marker"
    data = b"".join(parts)
    if error is not None:
        error = f"corrupt or truncated compressed data after {len(data):,} decompressed bytes ({error})"
    return data, error
