"""WARC reader (``.warc``, ``.warc.gz``; ARC files ``.arc``, ``.arc.gz``), as Common Crawl ships
web crawls.

Records are parsed by FastWARC (Resiliparse), ARC files by warcio. A run keeps the ``response``
records whose HTTP content type is HTML or text (`TEXT_TYPES`); every record is counted by its
``WARC-Type`` in run.json (``read.records``), and responses of other types by their content type
(``read.skipped``). The HTTP body is decoded with the charset the HTTP header (or, failing that, a
``<meta>`` tag) declares; when that is missing, unknown or wrong, with a detected charset
(counted as ``read.charset_detected``): uchardet's guess (Resiliparse's, as browsers sniff), else
charset-normalizer's. A body charset-normalizer finds no text in is set aside.

Columns: ``id`` (the ``WARC-Record-ID``), ``text`` (the decoded body), and `COLUMNS`, carried
through the run.

Damage is found per record, not per file, because each record of a ``.warc.gz`` is its own gzip
member and the reader decompresses member by member:

* a truncated or corrupt gzip member is a ``corrupt_file`` (every record before it is kept);
* a record whose ``Content-Length`` does not match the bytes of its member (a lie, or a cut)
  is a ``bad_record``; reading goes on at the next member;
* a response whose payload is not HTTP is ``not_http``; a body that nothing decodes is
  ``undecodable_body``.

In an uncompressed ``.warc`` the record starts are found by their ``WARC/1.x`` line after a
blank line, and a record whose length does not end where another starts is a ``bad_record``.

Large files are read as several partitions, cut at record starts (`split_blocks`): a
``.warc.gz`` at gzip members whose first bytes decompress to a WARC header, so a 1 GB Common
Crawl file is not one task.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import io
import logging
import os
import re
import zlib

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.errors import InputError
from gpupipe.frame import ID, TEXT, from_arrow
from gpupipe.io.files import derived_id_prefix, file_size, inflate, open_input
from gpupipe.io.source import FAIL_HINT, ReadResult, Rejections

log = logging.getLogger(__name__)

#: HTTP content types whose body is kept as a document (other responses are counted, skipped)
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
#: the columns a WARC input carries besides id and text, with their Arrow types
COLUMNS = {"url": pa.string(), "warc_date": pa.string(), "warc_record_id": pa.string(),
           "content_type": pa.string(), "http_status": pa.int32(), "warc_filename": pa.string()}
#: partition size of a WARC input when ``input.blocksize`` is not set (bytes of the file)
DEFAULT_BLOCKSIZE = 64 * 2**20
GZIP_MAGIC = b"\x1f\x8b\x08"
_RECORD_START = re.compile(rb"\r\n\r\n(WARC/1\.[01]\r\n)")
#: what may follow a record's block in its unit: line ends, then the next record or nothing
_AFTER_BLOCK = re.compile(rb"[\r\n]*(?:WARC/1\.[01]\r\n|\Z)")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_PROBE = 1 << 16


def is_gzip(path: str) -> bool:
    return path.lower().endswith(".gz")


def is_arc(path: str) -> bool:
    return path.lower().endswith((".arc", ".arc.gz"))


# -- partitions ---------------------------------------------------------------------------------

def split_blocks(files: tuple[str, ...], blocksize: int | None,
                 storage_options: dict | None = None) -> tuple[tuple[int, int, int], ...]:
    """``(file index, start, end)`` per partition (``end == -1``: to the end of the file). Files
    larger than ``blocksize`` are cut at record starts: gzip members for ``.warc.gz``, ``WARC/``
    lines for ``.warc``. ARC files are read whole."""
    blocks: list[tuple[int, int, int]] = []
    for fi, path in enumerate(files):
        size = file_size(path, storage_options)
        if blocksize is None or size <= blocksize or is_arc(path):
            blocks.append((fi, 0, -1))
            continue
        bounds = [0]
        try:
            with open_input(path, storage_options) as f:
                while (cut := _next_record_start(f, bounds[-1] + blocksize, size,
                                                 is_gzip(path))) < size:
                    bounds.append(cut)
        except ValueError as e:   # fsspec's HTTP file on a server that ignores Range
            if "range" not in str(e).lower():
                raise
            log.warning("%s: the server does not answer range requests; the file is read "
                        "whole, as one partition", path)
            blocks.append((fi, 0, -1))
            continue
        bounds.append(size)
        blocks.extend((fi, a, b if b < size else -1) for a, b in zip(bounds, bounds[1:]))
    return tuple(blocks)


def _next_record_start(f, target: int, size: int, gz: bool) -> int:
    """The offset of the first record starting at or after ``target`` (``size`` if none)."""
    pos = target
    while pos < size:
        f.seek(pos)
        chunk = f.read(_PROBE + 64)
        if not chunk:
            break
        if gz:
            k = chunk.find(GZIP_MAGIC)
            while k >= 0:
                if _member_is_warc(f, pos + k):
                    return pos + k
                k = chunk.find(GZIP_MAGIC, k + 1)
        else:
            m = _RECORD_START.search(chunk)
            if m is not None:
                return pos + m.start(1)
        pos += _PROBE   # the next read overlaps this one by 64 bytes
    return size


def _member_is_warc(f, offset: int) -> bool:
    """Whether a gzip member starting at ``offset`` decompresses to a WARC header."""
    here = f.tell()
    f.seek(offset)
    try:
        head = zlib.decompressobj(wbits=31).decompress(f.read(4096), 16)
    except zlib.error:
        head = b""
    f.seek(here)
    return head.startswith((b"WARC/1.0", b"WARC/1.1"))


# -- units: the bytes of each record, decompressed ----------------------------------------------

def _gzip_units(f, start: int, end: int):
    """``(offset, data, error)`` per gzip member in ``[start, end)`` (``end == -1``: to the end
    of the file): its decompressed bytes, and why it is damaged (None when it is whole)."""
    f.seek(start)
    raw = memoryview(f.read() if end == -1 else f.read(end - start))
    pos = 0
    while pos < len(raw):
        # zlib for damage, said in its words, and for reserved header flags, which ISA-L
        # ignores and zlib rejects
        lib = inflate if len(raw) <= pos + 3 or not raw[pos + 3] & 0xE0 else zlib
        data, p, error = _member(raw, pos, lib)
        if error is not None and lib is not zlib:
            data, p, error = _member(raw, pos, zlib)
        yield start + pos, data, error
        if error is not None:
            return
        pos = p
        while pos < len(raw) and raw[pos] == 0:   # NUL padding between members is allowed
            pos += 1


def _member(raw: memoryview, pos: int, lib) -> tuple[bytes, int, str | None]:
    """``(data, end, error)``: the gzip member at ``raw[pos:]`` decompressed by ``lib`` (ISA-L's
    or zlib's inflate), where it ends, and why it is damaged (None when it is whole)."""
    d, parts, p, step = lib.decompressobj(wbits=31), [], pos, 4096
    while True:   # feed growing pieces, so that what is left over stays small
        piece = raw[p:p + step]
        if not piece:
            return b"".join(parts), p, "unexpected end of file inside a gzip member"
        try:
            parts.append(d.decompress(piece))
        except lib.error as e:
            return b"".join(parts), p, f"corrupt gzip data ({e})"
        if d.eof:
            return b"".join(parts), p + len(piece) - len(d.unused_data), None
        p, step = p + len(piece), min(step * 2, 1 << 22)


def _plain_units(f, start: int, end: int):
    """``(offset, data, None)`` per record of an uncompressed WARC in ``[start, end)``, cut at
    each ``WARC/1.x`` line that follows a blank line."""
    f.seek(start)
    data = f.read() if end == -1 else f.read(end - start)
    starts = [0, *(m.start(1) for m in _RECORD_START.finditer(data))]
    for a, b in zip(starts, [*starts[1:], len(data)]):
        yield start + a, data[a:b], None


# -- the source ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class WarcSource:
    files: tuple[str, ...]
    root: str
    on_error: str = "fail"
    blocks: tuple[tuple[int, int, int], ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    text_column: str = "text"
    id_column: str | None = None
    #: fsspec options of remote paths (``s3://``: endpoint, credentials)
    storage_options: dict = dataclasses.field(default_factory=dict)

    default_blocksize = DEFAULT_BLOCKSIZE

    @classmethod
    def open(cls, files: tuple[str, ...], *, root: str, text_column: str = "text",
             id_column: str | None = None, on_error: str = "fail", left_out: tuple = (),
             columns: tuple[str, ...] = (), blocksize: int | None = None,
             storage_options: dict | None = None) -> WarcSource:
        """The source of a run's WARC files: one partition per ``blocksize`` bytes of a file,
        cut at record starts."""
        from gpupipe.errors import SpecError

        if text_column != "text" or id_column is not None or columns:
            raise SpecError("WARC input: the text is each response's body, the id its "
                            "WARC-Record-ID, and the columns are fixed ("
                            f"{', '.join(COLUMNS)}); remove input.text_column, input.id_column "
                            "and input.columns")
        _require()
        storage_options = dict(storage_options or {})
        return cls(files=tuple(files), root=root, on_error=on_error, left_out=tuple(left_out),
                   blocks=split_blocks(tuple(files), blocksize, storage_options),
                   storage_options=storage_options)

    @property
    def npartitions(self) -> int:
        return len(self.blocks)

    def describe(self, i: int) -> str:
        fi, start, end = self.blocks[i]
        path = self.files[fi]
        return path if start == 0 and end == -1 else f"{path} bytes {start}-{'' if end == -1 else end}"

    def meta(self) -> pd.DataFrame:
        return from_arrow(pa.table({ID: pa.array([], pa.string()), TEXT: pa.array([], pa.string()),
                                    **{c: pa.array([], t) for c, t in COLUMNS.items()}}))

    def read(self, i: int) -> ReadResult:
        fi, start, end = self.blocks[i]
        path = self.files[fi]
        name = derived_id_prefix(path, self.root)[:-1]
        rejections = Rejections(self.on_error, FAIL_HINT)
        out = _Collector(path, name, rejections)
        try:
            if is_arc(path):   # ARC files are read whole
                on_disk = file_size(path, self.storage_options)
                _read_arc(path, out, self.storage_options)
            else:
                with open_input(path, self.storage_options) as f:
                    # the size from the open file: no second request for a remote one
                    on_disk = (end if end != -1 else f.seek(0, os.SEEK_END)) - start
                    units = _gzip_units(f, start, end) if is_gzip(path) else _plain_units(
                        f, start, end)
                    _read_units(units, out)
        except OSError as e:
            raise InputError(f"{path}: cannot read the file ({e})") from e
        table = out.table()
        stats = {"files": 1 if start == 0 else 0, "compressed_bytes": on_disk,
                 "bytes": out.bytes, "files_corrupt": out.corrupt, "blank_lines": 0,
                 "docs": table.num_rows,
                 "text_bytes": int(pc.sum(pc.binary_length(table.column(TEXT))).as_py() or 0),
                 "records": dict(out.records), "skipped": dict(out.skipped),
                 "charset_detected": out.detected}
        return ReadResult(from_arrow(table), stats, rejections.counts, rejections.table())


def _require() -> None:
    try:
        import fastwarc  # noqa: F401
    except ImportError:
        from gpupipe.errors import SpecError

        raise SpecError("WARC input needs FastWARC: pip install 'gpupipe[web]'") from None


class _Collector:
    """The rows, counters and rejections of one partition."""

    def __init__(self, path: str, name: str, rejections: Rejections):
        self.path, self.name, self.rejections = path, name, rejections
        self.rows: dict[str, list] = {k: [] for k in (ID, TEXT, *COLUMNS)}
        self.records: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.bytes = self.corrupt = self.detected = 0

    def reject(self, offset: int, reason: str, detail: str, raw: bytes = b"") -> None:
        self.rejections.add(self.path, None, reason, f"record at byte {offset}: {detail}",
                            raw[:4096])

    def response(self, offset: int, record_id: str | None, date: str, url: str,
                 status: int | None, content_type: str | None, charset: str | None,
                 body: bytes) -> None:
        self.records["response"] = self.records.get("response", 0) + 1
        if status is None:
            self.reject(offset, "not_http", f"{url}: the payload is not an HTTP response", body)
            return
        mime = (content_type or "").split(";")[0].strip().lower()
        if mime not in TEXT_TYPES:
            key = mime or "(none)"
            self.skipped[key] = self.skipped.get(key, 0) + 1
            return
        text, detected = utf8_body(body, charset)
        if text is None:
            self.reject(offset, "undecodable_body", f"{url}: no charset decodes the body "
                        f"({len(body):,} bytes; declared {charset or 'none'})", body)
            return
        self.detected += detected
        self.bytes += len(body)
        for key, value in ((ID, record_id or f"{self.name}:{offset}"), (TEXT, text),
                           ("url", url), ("warc_date", date),
                           ("warc_record_id", record_id), ("content_type", mime),
                           ("http_status", status), ("warc_filename", self.name)):
            self.rows[key].append(value)

    def table(self) -> pa.Table:
        # the texts are UTF-8 bytes: pyarrow builds a string column from str objects at a
        # fraction of the speed (3-10x, on HTML with some non-ASCII characters)
        return pa.table({ID: pa.array(self.rows[ID], pa.string()),
                         TEXT: pa.array(self.rows[TEXT], pa.binary()).cast(pa.string()),
                         **{c: pa.array(self.rows[c], t) for c, t in COLUMNS.items()}})


def utf8_body(body: bytes, declared: str | None) -> tuple[bytes | None, int]:
    """`decode_body` as UTF-8 bytes. A body in UTF-8 (declared, or by default) is its own bytes,
    NUL bytes removed, once validated (an ASCII one at memory speed), and is not encoded again
    from a ``str``: most of the web.

    >>> utf8_body("café".encode("latin-1"), "iso-8859-1")
    (b'caf\\xc3\\xa9', 0)
    >>> utf8_body(b"<p>a\\x00b", None)
    (b'<p>ab', 0)
    """
    declared = declared or _meta_charset(body)
    if (declared is None or _is_utf8(declared)) and (body.isascii() or _valid_utf8(body)):
        return (body.replace(b"\x00", b"") if b"\x00" in body else body), 0
    text, detected = decode_body(body, declared)
    return (None, 0) if text is None else (text.encode("utf-8"), detected)


def _valid_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@functools.lru_cache(maxsize=256)
def _is_utf8(charset: str) -> bool:
    try:
        return codecs.lookup(charset).name == "utf-8"
    except (LookupError, ValueError):   # ValueError: a NUL character in the name
        return False


def _meta_charset(body: bytes) -> str | None:
    """The charset a ``<meta>`` tag in the body's first 2 kB declares."""
    m = _META_CHARSET.search(body[:2048])
    return m.group(1).decode("ascii") if m else None


def decode_body(body: bytes, declared: str | None) -> tuple[str | None, int]:
    """``(text, 1 if detected else 0)``: the body decoded with the declared charset (HTTP
    header, else a ``<meta>`` tag in its first 2 kB), else UTF-8, else with the charset uchardet
    (Resiliparse) detects, else charset-normalizer's; ``(None, 0)`` when charset-normalizer finds
    no text in it (binary junk). NUL characters are removed.

    >>> decode_body("café".encode("latin-1"), "iso-8859-1")
    ('café', 0)
    >>> decode_body("café".encode("latin-1"), "utf-8")   # a charset lie
    ('café', 1)
    """
    declared = declared or _meta_charset(body)
    for charset in dict.fromkeys(c for c in (declared, "utf-8") if c):
        try:
            return _clean(body.decode(charset), charset, body), 0
        except (LookupError, ValueError):   # a UnicodeError, or a NUL in the charset name
            continue
    from charset_normalizer import from_bytes

    best = from_bytes(body).best()
    if best is None:
        return None, 0
    # charset-normalizer alone takes Western European text for Baltic or Central European (and
    # "café" in Latin-1 for UTF-16); uchardet, the browsers' kind of detector, does not
    guess = _uchardet(body)
    if guess is not None:
        try:
            return _clean(body.decode(guess), guess, body), 1
        except (LookupError, ValueError):   # a UnicodeError, or a NUL in the charset name
            pass
    try:
        return _clean(str(best), best.encoding, body), 1
    except UnicodeError:
        return None, 0


def _uchardet(body: bytes) -> str | None:
    try:
        from resiliparse.parse.encoding import detect_encoding
    except ImportError:
        return None
    return detect_encoding(body)


def _clean(text: str, charset: str, body: bytes) -> str:
    """``text`` without NUL characters; ``UnicodeError`` when it holds a lone surrogate, which
    has no UTF-8 form (a decoder other than UTF-8's can give one: ``unicode_escape``)."""
    if charset.lower().replace("_", "-") in ("utf-8", "utf8", "ascii", "us-ascii"):
        # no surrogates come out of these; a NUL character only from a NUL byte
        return text.replace("\x00", "") if b"\x00" in body else text
    text = text.replace("\x00", "")
    text.encode("utf-8")
    return text


def _read_units(units, out: _Collector) -> None:
    """Parse each unit (a gzip member, or the bytes of one uncompressed record) with FastWARC."""
    from fastwarc.warc import ArchiveIterator

    for offset, data, error in units:
        if error is not None:
            out.corrupt = 1
            out.rejections.add(out.path, None, "corrupt_file",
                               f"gzip member at byte {offset}: {error}; the records before "
                               f"it are kept")
            if data.startswith(b"WARC/"):
                out.reject(offset, "truncated_record", "record cut off by the damage", data)
            return
        if not data.strip(b"\r\n\x00"):
            continue
        try:
            for record in ArchiveIterator(io.BytesIO(data), parse_http=False):
                if not _record(record, data, offset, out):
                    break   # what follows a Content-Length that lies is not a record
        except OSError as e:
            out.reject(offset, "bad_record", f"not a valid WARC record ({e}); a wrong "
                       f"Content-Length, or bytes between records", data)


def _record(record, data: bytes, offset: int, out: _Collector) -> bool:
    """Count and collect one record of ``data`` (its unit); False when its Content-Length
    lies, a ``bad_record`` after which the rest of the unit is not read."""
    kind = record.headers.get("WARC-Type") or "(none)"
    declared = record.content_length
    block = record.reader.read()
    url = record.headers.get("WARC-Target-URI") or ""
    if len(block) != declared or not _block_ends(data, record):
        out.records[kind] = out.records.get(kind, 0) + 1
        follow = f"{len(block):,} bytes follow" if len(block) != declared else (
            "more bytes follow before the next record")
        out.reject(offset, "bad_record", f"{kind} record {url}: Content-Length {declared:,}, "
                   f"but {follow}", block)
        return False
    if kind != "response":
        out.records[kind] = out.records.get(kind, 0) + 1
        return True
    status, ctype, charset, body = parse_http(block)
    del block
    out.response(offset, record.record_id, record.headers.get("WARC-Date") or "", url,
                 status, ctype, charset, body)
    return True


def _block_ends(data: bytes, record) -> bool:
    """Whether the record's block, ``Content-Length`` bytes after its header, ends where the
    next record or the unit does (line ends between them aside). A Content-Length that is too
    small leaves bytes that FastWARC would otherwise hand over as a shorter block."""
    head = data.find(b"\r\n\r\n", record.stream_pos)
    return head >= 0 and _AFTER_BLOCK.match(data, head + 4 + record.content_length) is not None


def charset_of(content_type: str | None) -> str | None:
    """The lower-cased ``charset`` parameter of an HTTP Content-Type, unquoted, or None.

    >>> charset_of('text/html; charset="ISO-8859-1"; x=y')
    'iso-8859-1'
    """
    if not content_type or "charset=" not in content_type.lower():
        return None
    value = content_type.lower().split("charset=")[-1].split(";")[0]
    return value.strip().strip("\"'") or None


_STATUS = re.compile(rb"HTTP/\d(?:\.\d)? (\d{3})")


def parse_http(block: bytes) -> tuple[int | None, str | None, str | None, bytes]:
    """``(status, content type, charset, body)`` of an HTTP response block; status None when it
    is not one. A body with ``Content-Encoding: gzip`` or ``deflate`` is decoded (Common Crawl
    stores bodies decoded, keeping the header: such a body is used as it is).

    >>> parse_http(b"HTTP/1.1 200 OK\\r\\nContent-Type: text/html; charset=UTF-8\\r\\n\\r\\n<p>hi")
    (200, 'text/html; charset=UTF-8', 'utf-8', b'<p>hi')
    """
    head, sep, body = block.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = block.partition(b"\n\n")
    lines = head.split(b"\n")
    m = _STATUS.match(lines[0]) if sep else None
    if m is None:
        return None, None, None, block
    fields: dict[str, str] = {}
    for line in lines[1:]:
        key, colon, value = line.partition(b":")
        if colon:
            fields[key.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
    ctype = fields.get("content-type")
    charset = charset_of(ctype)
    encoding = fields.get("content-encoding", "").lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            body = zlib.decompressobj(wbits=47).decompress(body)   # gzip or zlib header
        except zlib.error:
            pass   # stored already decoded (Common Crawl keeps the header); use it as it is
    return int(m.group(1)), ctype, charset, body


def _read_arc(path: str, out: _Collector, storage_options: dict | None = None) -> None:
    """An ARC file, through warcio (each ARC record reads as a WARC ``response``). ARC records
    have no id: a document's id is ``<file>:<byte offset of its record>``, and
    ``warc_record_id`` is null."""
    try:
        from warcio.archiveiterator import ArchiveIterator
    except ImportError:
        from gpupipe.errors import SpecError

        raise SpecError("ARC input needs warcio: pip install 'gpupipe[web]'") from None
    damage = None   # warcio reads a cut gzip member without a word: find it first
    if is_gzip(path):
        with open_input(path, storage_options) as f:
            damage = next(((offset, error) for offset, _, error in _gzip_units(f, 0, -1)
                           if error is not None), None)
    with open_input(path, storage_options) as f:
        it = ArchiveIterator(f, arc2warc=True)
        try:
            for record in it:
                kind = record.rec_type
                body = record.content_stream().read()   # before the offset: warcio reads on
                offset = it.get_record_offset()
                if damage is not None and offset >= damage[0]:
                    out.reject(offset, "truncated_record", "record cut off by the damage")
                    break
                if kind != "response":
                    out.records[kind] = out.records.get(kind, 0) + 1
                    continue
                status = record.http_headers.get_statuscode() if record.http_headers else None
                ctype = record.http_headers.get_header("Content-Type") if status else None
                out.response(offset, None, record.rec_headers.get_header("WARC-Date") or "",
                             record.rec_headers.get_header("WARC-Target-URI") or "",
                             int(status) if status and status.isdigit() else None, ctype,
                             charset_of(ctype), body)
        except InputError:   # a record set aside under on_error: fail
            raise
        except Exception as e:   # warcio raises several kinds on damage
            damage = damage or (None, f"cannot read on ({type(e).__name__}: {e})")
    if damage is not None:
        out.corrupt = 1
        where = "" if damage[0] is None else f"gzip member at byte {damage[0]}: "
        out.rejections.add(path, None, "corrupt_file", f"{where}{damage[1]}; the records "
                           f"before it are kept")
