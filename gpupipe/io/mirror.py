"""A run directory on object storage (``output.path: s3://bucket/run``).

The run works in a local staging directory, exactly as a run on a local path; the remote prefix
is kept a faithful copy of it, in an order that makes every state of the remote a state that
resume accepts (the manifest-last protocol of ``docs/formats.md``):

* a push uploads the data files first, then the completion markers (``_done/…``,
  ``_fingerprint``, index ``manifest.json``), then the segment states (``_segment.json``,
  ``shards/manifest.json``), and ``run.json`` last; an object store shows an object whole or
  not at all, so a marker is never there before what it marks;
* files deleted locally are deleted remotely in the reverse order, markers before data;
* a pull (the start of every run) makes the staging directory equal to the remote: objects
  whose ETag changed, or that the staging directory lacks, are downloaded, and local files the
  remote does not hold are removed. A run killed on one machine resumes on another.

Pushes happen when a segment or a step is committed and every ``sync_seconds`` while the run
works. What was pushed is recorded in the staging directory (``.gpupipe-mirror.json``: size,
modification time and ETag per file), so a push sends only what changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time

from gpupipe.errors import OutputError
from gpupipe.io.files import filesystem, is_url, object_version, remote_error

log = logging.getLogger(__name__)

STATE = ".gpupipe-mirror.json"
#: files that commit others, by rank: pushed after lower ranks, deleted before them
_COMMIT_RANK = {"_fingerprint": 1, "_segment.json": 2, "_complete.json": 2,
                "manifest.json": 2, "index.json": 2}


def rank(rel: str) -> int:
    """0 for data, higher for the markers that say data is complete (pushed later)."""
    if rel == "run.json":       # the run's own, last (one below the root is data)
        return 3
    if "/_done/" in f"/{rel}":
        return 1
    return _COMMIT_RANK.get(rel.rsplit("/", 1)[-1], 0)


def default_staging(url: str, kind: str = "staging") -> str:
    """``$GPUPIPE_STAGING/<kind>`` or ``~/.cache/gpupipe/<kind>``, one folder per URL."""
    base = os.environ.get("GPUPIPE_STAGING") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpupipe")
    tail = url.rstrip("/").rsplit("/", 1)[-1] or "run"
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:12]
    return os.path.join(base, kind, f"{tail}-{digest}")


def fetch_run(url: str, parts: tuple[str, ...], storage_options: dict | None = None) -> str:
    """A local copy of some files of a run on object storage (``run.json``, a folder such as
    ``dedup/index/exact_dedup/``), refreshed by ETag; returns the local run directory. What
    ``against:`` reads."""
    mirror = RunMirror(url, default_staging(url, "runs"), storage_options, 0)
    mirror.pull(only=parts)
    return mirror.staging


class RunMirror:
    """The remote copy of a staging directory: `pull`, `push`, `clear`, and background pushes
    (`start` / `stop`)."""

    def __init__(self, url: str, staging: str | None = None, storage_options: dict | None = None,
                 sync_seconds: float = 60.0):
        if not is_url(url):
            raise ValueError(f"{url!r} is not a URL")
        self.url = url.rstrip("/")
        self.staging = os.path.abspath(os.path.expanduser(staging or default_staging(self.url)))
        self.storage_options = storage_options
        self.sync_seconds = sync_seconds
        self.fs, self.root = filesystem(self.url, storage_options)
        self.root = self.root.rstrip("/")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the remote side ------------------------------------------------------------------

    def _error(self, e: BaseException) -> OutputError:
        return remote_error(self.url, e, "output.storage_options", OutputError)

    def _key(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def listing(self) -> dict[str, dict]:
        """Every object under the prefix: relative path -> info (size, ETag)."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root, detail=True)   # a missing bucket raises here
            if not found and self.fs.isfile(self.root):
                raise OutputError(f"output.path {self.url!r} is an object, not a prefix; give a "
                                  f"directory-like path")
        except OutputError:
            raise
        except Exception as e:
            raise self._error(e) from e
        out = {}
        for key, info in found.items():
            if info.get("type") == "directory":
                continue
            rel = key[len(self.root) + 1:]
            if rel and not rel.rsplit("/", 1)[-1].startswith("."):
                out[rel] = info
        return out

    def clear(self) -> None:
        """``overwrite``: delete the remote run and the staging directory."""
        self._check_staging()
        keys = sorted(self.listing(), key=lambda r: -rank(r))
        try:
            for rel in keys:
                self.fs.rm_file(self._key(rel))
        except Exception as e:
            raise self._error(e) from e
        shutil.rmtree(self.staging, ignore_errors=True)

    # --- the staging side -----------------------------------------------------------------

    def _read_state(self) -> dict | None:
        try:
            with open(os.path.join(self.staging, STATE), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def _load_state(self) -> dict:
        state = self._read_state() or {}
        return state.get("files") or {} if state.get("url") == self.url else {}

    def _check_staging(self) -> None:
        """A pull deletes what the remote lacks: only from a staging directory of this URL
        (or an empty one), never from a directory a user named by mistake."""
        if not os.path.isdir(self.staging):
            if os.path.exists(self.staging):
                raise OutputError(f"output.staging {self.staging!r} is a file; give a directory")
            return
        state = self._read_state()
        if state is None and os.listdir(self.staging):
            raise OutputError(f"output.staging {self.staging!r} is not empty and is not the "
                              f"staging directory of a run on object storage; choose another "
                              f"output.staging (nothing was deleted)")
        if state is not None and state.get("url") != self.url:
            raise OutputError(f"output.staging {self.staging!r} is the staging directory of "
                              f"{state.get('url')!r}, not of {self.url!r}; choose another "
                              f"output.staging (nothing was deleted)")

    def _save_state(self, files: dict) -> None:
        path = os.path.join(self.staging, STATE)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"url": self.url, "files": files}, f, indent=0, sort_keys=True)
        os.replace(tmp, path)

    def _local(self) -> dict[str, list[int]]:
        """Every finished file of the staging directory: relative path -> [size, mtime_ns]
        (hidden names, which `atomic_path` gives to files being written, left out)."""
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.staging):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith("."):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                out[os.path.relpath(path, self.staging).replace(os.sep, "/")] = \
                    [st.st_size, st.st_mtime_ns]
        return out

    def pull(self, only: tuple[str, ...] | None = None,
             listed: dict[str, dict] | None = None) -> dict:
        """Make the staging directory equal to the remote run (``only``: the files that are, or
        start with, these relative paths; ``listed``: the `listing` the caller just made);
        returns counts."""

        def wanted(rel: str) -> bool:
            return only is None or any(rel == p or (p.endswith("/") and rel.startswith(p))
                                       for p in only)

        with self._lock:
            self._check_staging()
            remote = {r: v for r, v in (self.listing() if listed is None else listed).items()
                      if wanted(r)}
            try:
                os.makedirs(self.staging, exist_ok=True)
            except OSError as e:
                raise OutputError(f"cannot create output.staging {self.staging!r}: "
                                  f"{e.strerror}") from None
            state = self._load_state()
            local = {r: v for r, v in self._local().items() if wanted(r)}
            new_state, fetch = {}, []
            for rel, info in sorted(remote.items()):
                rec = state.get(rel)
                if rec and rec[2] == object_version(info) and local.get(rel) == rec[:2]:
                    new_state[rel] = rec
                else:
                    fetch.append(rel)
            paths = [os.path.join(self.staging, *rel.split("/")) for rel in fetch]
            tmps = [os.path.join(os.path.dirname(p), f".{os.path.basename(p)}.pull")
                    for p in paths]
            for p in paths:
                os.makedirs(os.path.dirname(p), exist_ok=True)
            try:
                if fetch:   # concurrently, on an async filesystem such as s3fs
                    self.fs.get([self._key(rel) for rel in fetch], tmps)
            except Exception as e:
                raise self._error(e) from e
            for rel, path, tmp in zip(fetch, paths, tmps):
                os.replace(tmp, path)
                st = os.stat(path)
                size = int(remote[rel].get("size") or 0)
                if st.st_size != size:
                    raise OutputError(f"{self.url}/{rel}: downloaded {st.st_size} bytes, the "
                                      f"store lists {size}")
                new_state[rel] = [st.st_size, st.st_mtime_ns, object_version(remote[rel])]
            got, kept, removed = len(fetch), len(remote) - len(fetch), 0
            for rel in sorted(set(local) - set(remote), key=lambda r: -rank(r)):
                os.remove(os.path.join(self.staging, *rel.split("/")))
                removed += 1
            self._save_state(new_state)
            if got or removed:
                log.info("%s: staging %s: %d file(s) downloaded, %d kept, %d removed",
                         self.url, self.staging, got, kept, removed)
            return {"downloaded": got, "kept": kept, "removed": removed}

    def push(self) -> dict:
        """Upload what changed in the staging directory since the last push, data first and
        ``run.json`` last; delete what was removed, markers first."""
        with self._lock:
            state = self._load_state()
            # markers are listed before data: a marker seen here was written after its data,
            # so the second listing holds that data
            first = {r: v for r, v in self._local().items() if rank(r) > 0}
            data = {r: v for r, v in self._local().items() if rank(r) == 0}
            now = {**data, **first}
            sent, deleted = {}, 0
            try:
                gone = set(state) - set(now)
                for r in (2, 1, 0):   # run.json (rank 3) stays: it says what the prefix is
                    keys = sorted(k for k in gone if rank(k) == r)
                    if keys:
                        self.fs.rm([self._key(k) for k in keys])
                        for k in keys:
                            del state[k]
                        deleted += len(keys)
                for r in range(4):
                    todo = sorted(k for k in now if rank(k) == r
                                  and state.get(k, [None, None])[:2] != now[k])
                    if not todo:
                        continue
                    try:   # concurrently, on an async filesystem such as s3fs
                        self.fs.put([os.path.join(self.staging, *k.split("/")) for k in todo],
                                    [self._key(k) for k in todo])
                    except FileNotFoundError:
                        break   # data vanished while pushing (a reset): no marker this time
                    sent.update((k, now[k]) for k in todo)
                if sent:   # the ETags, from one listing instead of a request per file
                    listed = self.listing()
                    for k, size_mtime in sent.items():
                        if k in listed:
                            state[k] = [*size_mtime, object_version(listed[k])]
            except OutputError:
                raise
            except Exception as e:
                raise self._error(e) from e
            finally:
                self._save_state(state)
            return {"uploaded": len(sent), "deleted": deleted}

    # --- pushes while the run works -------------------------------------------------------

    def start(self) -> None:
        """Push every ``sync_seconds`` in a background thread until `stop`."""
        if self.sync_seconds <= 0 or self._thread is not None:
            return
        self._stop.clear()

        def loop():
            while not self._stop.wait(self.sync_seconds):
                t0 = time.perf_counter()
                try:
                    got = self.push()
                except Exception as e:   # the next push, or the final one, says it again
                    log.warning("%s: background upload failed: %s", self.url, e)
                    continue
                if got["uploaded"]:
                    log.info("%s: %d file(s) uploaded in %.1fs", self.url, got["uploaded"],
                             time.perf_counter() - t0)

        self._thread = threading.Thread(target=loop, name="gpupipe-mirror", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
