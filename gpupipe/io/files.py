"""Finding input files and reading their bytes, compressed or not, without losing data silently.

Paths are local, or URLs of any filesystem fsspec knows (``s3://``, ``gs://``, ``http(s)://``,
``file://``), opened with the input's ``storage_options``. On S3, throttling (``SlowDown``)
is retried with botocore's adaptive backoff unless the options say otherwise.
"""

from __future__ import annotations

import glob
import os
import re
import zlib
from pathlib import Path

from gpupipe.errors import GpupipeError, InputError

CHUNK = 1 << 22

try:   # ISA-L's inflate: zlib's format and API, about twice its speed
    from isal import isal_zlib as inflate
except ImportError:   # pragma: no cover - isal has wheels wherever gpupipe runs
    inflate = zlib
#: botocore's retries for S3 unless ``storage_options`` set their own (throttling backs off)
S3_RETRIES = {"max_attempts": 10, "mode": "adaptive"}


def is_url(path) -> bool:
    """A remote path (``s3://…``), read through fsspec; ``file://`` counts as local."""
    path = os.fspath(path)
    return "://" in path and not path.startswith("file://")


_SECRET = re.compile(r"secret|token|password|passwd|credential|session", re.I)


def redact_options(obj, drop: bool = False):
    """``obj`` (nested dicts and lists) with every ``storage_options`` mapping's secrets
    (secret keys, tokens, passwords) shown as ``"***"``: what run.json and the report record.
    With ``drop``, without the ``storage_options`` at all: what fingerprints hash, so new
    credentials recompute nothing."""
    if hasattr(obj, "model_dump"):   # a pydantic parameter (an eval set) as its mapping
        obj = obj.model_dump(mode="json")
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "storage_options" and isinstance(v, dict):
                if not drop:
                    out[k] = _mask(v)
            else:
                out[k] = redact_options(v, drop)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_options(v, drop) for v in obj]
    return obj


def _mask(options: dict) -> dict:
    return {k: ("***" if _SECRET.search(str(k)) and v else
                _mask(v) if isinstance(v, dict) else v) for k, v in options.items()}


def local_path(path) -> str:
    path = os.fspath(path)
    return path[len("file://"):] if path.startswith("file://") else path


def filesystem(url: str, storage_options: dict | None = None):
    """``(fsspec filesystem, path without the protocol)`` of a URL."""
    import fsspec

    options = dict(storage_options or {})
    protocol = url.split("://", 1)[0]
    if protocol in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("retries", S3_RETRIES)
        options["config_kwargs"] = config
    try:
        if protocol in ("gs", "gcs") and (options.get("endpoint_url")
                                          or os.environ.get("STORAGE_EMULATOR_HOST")):
            # an emulator or a private endpoint: gcsfs's default class (2026.10) first asks
            # Google's gRPC control API for each bucket's type, which such an endpoint does not
            # serve (a minute of retries, then its fallback: this class)
            from gcsfs.core import GCSFileSystem

            return GCSFileSystem(**options), GCSFileSystem._strip_protocol(url)
        return fsspec.core.url_to_fs(url, **options)
    except (ImportError, ValueError) as e:
        raise InputError(f"{url}: cannot open this filesystem ({e}); s3:// and http(s):// "
                         f"need pip install 'gpupipe[cloud]', gs:// pip install 'gpupipe[gcs]'") from None


def remote_error(url: str, e: BaseException, options: str = "input.storage_options",
                 error: type[GpupipeError] = InputError) -> GpupipeError:
    """An error (`InputError` unless ``error`` says) naming the URL and its bucket for a
    failure of the remote store; ``options`` is where the credentials can be given."""
    bucket = url.split("://", 1)[1].split("/", 1)[0] if "://" in url else ""
    kind = type(e).__name__
    text = str(e) or kind
    gcs = url.startswith(("gs://", "gcs://"))
    if isinstance(e, PermissionError) or "AccessDenied" in text or "InvalidAccessKeyId" in text \
            or "SignatureDoesNotMatch" in text or "NoCredentials" in kind or (gcs and (
                text.startswith("Forbidden: ")   # gcsfs: 403 (401 is its HttpError's code)
                or getattr(e, "code", None) == 401 or "GoogleAuthError" in kind
                or "DefaultCredentialsError" in kind)):
        where = ("GOOGLE_APPLICATION_CREDENTIALS, or the token of " if gcs else
                 "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or ")
        why = (f"access denied to bucket {bucket!r} ({text.splitlines()[0] if gcs else text}); "
               f"check the credentials ({where}{options})")
    elif "NoSuchBucket" in text or (isinstance(e, FileNotFoundError) and (
            # (the bucket's own name may hold the word) GCS's JSON API path of a missing
            # bucket's listing or upload:
            "bucket" in text.replace(bucket, "").lower()
            or re.search(rf"(?:^|/)b/{re.escape(bucket)}/o(?:$|\?)", text))):
        why = f"the bucket {bucket!r} does not exist ({text})"
    elif isinstance(e, FileNotFoundError):
        why = f"not found ({text})"
    else:
        why = f"{kind}: {text}"
    return error(f"{url}: {why}")


def open_input(path: str, storage_options: dict | None = None):
    """A binary file object of an input file, local or remote (seekable either way)."""
    if not is_url(path):
        try:
            return open(local_path(path), "rb")
        except OSError as e:
            raise InputError(f"{path}: cannot read the file ({e})") from e
    fs, stripped = filesystem(path, storage_options)
    fs.invalidate_cache(stripped)   # a cached listing may hold an older object's size
    try:
        return fs.open(stripped, "rb")
    except Exception as e:
        raise remote_error(path, e) from e


def file_size(path: str, storage_options: dict | None = None) -> int:
    if not is_url(path):
        return os.path.getsize(local_path(path))
    fs, stripped = filesystem(path, storage_options)
    fs.invalidate_cache(stripped)
    try:
        return int(fs.size(stripped))
    except Exception as e:
        raise remote_error(path, e) from e


def arrow_path(path: str, storage_options: dict | None = None):
    """``(path, filesystem)`` for pyarrow's readers: a local path and None, or the path inside
    its fsspec filesystem."""
    if not is_url(path):
        return local_path(path), None
    fs, stripped = filesystem(path, storage_options)
    return stripped, fs


def file_identity(path: str, storage_options: dict | None = None) -> list:
    """``[path, size, version]`` of an input file, for resume: the modification time of a
    local file, the ETag (else the modification time) of a remote one."""
    if not is_url(path):
        st = os.stat(local_path(path))
        return [os.path.abspath(local_path(path)), st.st_size, st.st_mtime_ns]
    fs, stripped = filesystem(path, storage_options)
    try:
        info = fs.info(stripped)
    except Exception as e:
        raise remote_error(path, e) from e
    return [path, int(info.get("size") or 0), object_version(info)]


def object_version(info: dict) -> str:
    """What changes when a remote object does: its ETag, else its modification time (an
    fsspec ``info`` mapping)."""
    return str(info.get("ETag") or info.get("etag") or info.get("LastModified")
               or info.get("mtime") or "").strip('"')


def _expand_remote(pattern: str, suffixes, storage_options) -> list[str]:
    fs, stripped = filesystem(pattern, storage_options)
    # fsspec keeps one filesystem per set of options, with the listings it saw: a notebook's
    # second run must see objects written since
    fs.invalidate_cache()
    try:
        if glob.has_magic(stripped):
            found = [p for p, info in fs.glob(stripped, detail=True).items()
                     if info.get("type") != "directory"]
        elif fs.isdir(stripped):
            found = [p for p in fs.find(stripped)
                     if suffixes is None or p.lower().endswith(suffixes)]
        else:
            found = [stripped] if fs.exists(stripped) else []
            if not found and not pattern.startswith(("http://", "https://")):
                # name the bucket when it is the bucket that is missing
                bucket = stripped.split("/", 1)[0]
                if bucket and not fs.exists(bucket):
                    raise FileNotFoundError(f"NoSuchBucket: {bucket}")
    except InputError:
        raise
    except Exception as e:
        raise remote_error(pattern, e) from e
    return [fs.unstrip_protocol(p) for p in sorted(found)]


def expand_paths(patterns: str | list[str], *, suffixes: tuple[str, ...] | None = None,
                 not_files: list | None = None,
                 storage_options: dict | None = None) -> list[str]:
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
        pattern = str(pattern)
        if is_url(pattern):
            remote = _expand_remote(pattern, suffixes, storage_options)
            if not remote:
                raise InputError(f"input path {pattern!r} matches no file; check input.path")
            found.extend(remote)
            continue
        pattern = os.path.expanduser(local_path(pattern))
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
            if os.path.isdir(pattern) and suffixes is not None:
                raise InputError(
                    f"input path {pattern!r} is a directory without a file ending in "
                    f"{', '.join(suffixes[:6])}{' …' if len(suffixes) > 6 else ''}; check "
                    f"input.path and input.format")
            raise InputError(
                f"input path {pattern!r} matches no file (relative paths are resolved from "
                f"{os.getcwd()}); check input.path"
            )
        found.extend(matches)
    if not_files is not None:
        not_files.extend(sorted(set(odd)))
    return sorted(dict.fromkeys(p if is_url(p) else os.path.normpath(p) for p in found))


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
    if any(is_url(p) for p in paths):
        import posixpath

        dirs = [posixpath.dirname(p.split("://", 1)[1]) for p in paths]
        protocols = {p.split("://", 1)[0] if is_url(p) else "" for p in paths}
        prefix = f"{protocols.pop()}://" if len(protocols) == 1 else ""
        return prefix + posixpath.commonpath(dirs) if prefix else "/"
    dirs = [os.path.dirname(os.path.abspath(p)) for p in paths]
    return os.path.commonpath(dirs)


def derived_id_prefix(path: str, root: str) -> str:
    """``<path relative to root>:``, the prefix of the ids derived for a file without an id
    column (``<file>:<line>``, ``<file>:<row>``)."""
    if is_url(path):
        import posixpath

        rel = path.split("://", 1)[1]
        base = root.split("://", 1)[1] if "://" in root else root
        return posixpath.relpath(rel, base or "/") + ":"
    return os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/") + ":"


def compression_of(path: str) -> str | None:
    name = path.lower()
    if name.endswith(".gz"):
        return "gzip"
    if name.endswith((".zst", ".zstd")):
        return "zstd"
    return None


def read_bytes(path: str, storage_options: dict | None = None) -> tuple[bytes, str | None]:
    """The decompressed content of ``path`` and, if the file is corrupt or truncated, why.

    What could be decompressed before the damage is returned, so a ``skip`` policy keeps every
    complete record that precedes it.
    """
    kind = compression_of(path)
    try:
        if kind is None:
            with open_input(path, storage_options) as f:
                return f.read(), None
        if kind == "gzip":
            data, error = _read_frames(path, lambda: inflate.decompressobj(wbits=31),
                                       inflate.error, storage_options)
            if error is not None and inflate is not zlib:   # damage: said in zlib's words
                data, error = _read_frames(path, lambda: zlib.decompressobj(wbits=31),
                                           zlib.error, storage_options)
            return data, error
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        return _read_frames(path, dctx.decompressobj, zstandard.ZstdError, storage_options)
    except OSError as e:  # unreadable file: permissions, vanished, I/O error
        if is_url(path):
            raise remote_error(path, e) from e
        raise InputError(f"{path}: cannot read the file ({e})") from e


def _read_frames(path: str, new_decompressor, errors,
                 storage_options: dict | None = None) -> tuple[bytes, str | None]:
    """Decompress every gzip member / zstd frame; on damage, keep what came out before it.

    A stream that just stops (a truncated download) is reported too: the last member never
    reaches its end marker.
    """
    parts: list[bytes] = []
    error = None
    d, fed = new_decompressor(), False
    with open_input(path, storage_options) as f:
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
