"""Finding input files and reading their bytes, compressed or not, without losing data silently."""

from __future__ import annotations

import glob
import os
import zlib
from pathlib import Path

from gpupipe.errors import InputError

CHUNK = 1 << 22


def expand_paths(patterns: str | list[str], *, suffixes: tuple[str, ...] | None = None) -> list[str]:
    """Expand globs (``**`` allowed) and directories into a sorted, de-duplicated file list.

    Raises `InputError` naming the pattern when it matches nothing.
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    found: list[str] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        if os.path.isdir(pattern):
            matches = [
                str(p) for p in sorted(Path(pattern).rglob("*"))
                if p.is_file() and (suffixes is None or p.name.endswith(suffixes))
            ]
        elif glob.has_magic(pattern):
            matches = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        else:
            matches = [pattern] if os.path.isfile(pattern) else []
        if not matches:
            raise InputError(
                f"input path {pattern!r} matches no file (relative paths are resolved from "
                f"{os.getcwd()}); check input.path"
            )
        found.extend(matches)
    return sorted(dict.fromkeys(os.path.normpath(p) for p in found))


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
