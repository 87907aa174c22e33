"""``tiermem blob put|get|ls|rm|search`` and ``tiermem import|export DIR``.

Folders: ``import DIR`` stores every file under DIR as the blob
``<prefix><relative/path>`` (media type guessed from the name); ``export DIR``
writes every blob under a prefix back as files. Both show a progress bar on a
terminal (``--progress`` forces it, ``--no-progress`` hides it), verify hashes
(the daemon checks each upload's SHA-256; each export is checked against the
blob's SHA-256 before it is renamed into place), and are resumable: run the same
command again and files already done are skipped by hash, and an upload cut
off mid-file continues from the daemon's acknowledged offset (the upload ids
in flight are kept in a small state file, ``--state``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import mimetypes
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser is built for every command: keep its imports light
    from tiermem.client import Client
    from tiermem.client.blobs import BlobInfo

COMMANDS = ("blob", "import", "export")
READ_BYTES = 8 << 20
#: Progress redraws at most this often (seconds).
REDRAW_S = 0.2
#: Errors answered by restarting an upload rather than resuming it.
RESTART_CODES = ("NOT_FOUND", "FAILED_PRECONDITION", "OUT_OF_RANGE", "INVALID_ARGUMENT")


def add_parsers(sub: Any, client_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``blob``, ``import`` and ``export`` on the main parser's subparsers."""
    p = sub.add_parser("blob", help="blobs: large objects with metadata and embeddings")
    bsub = p.add_subparsers(dest="blob_command", required=True)

    q = bsub.add_parser("put", help="store a file as a blob (streamed, resumable)")
    client_args(q)
    q.add_argument("file", help="path of the file ('-' for stdin)")
    q.add_argument("key", nargs="?", default=None, help="blob key (default: the file name)")
    _meta_args(q)
    q.add_argument(
        "--embedding", action="append", default=[], metavar="SPACE=V1,V2,...|SPACE=@F.npy",
        help="an embedding in a named space (repeatable)",
    )  # fmt: skip
    q.add_argument("--session", default="", help="owning session (deleted when it closes)")
    _progress_args(q)

    q = bsub.add_parser("get", help="write a blob (or a byte range) to a file or stdout")
    client_args(q)
    q.add_argument("key")
    q.add_argument("output", nargs="?", default="-", help="file path, or - for stdout")
    q.add_argument("--offset", type=int, default=0)
    q.add_argument("--length", type=int, default=0, help="bytes (0: to the end)")
    _progress_args(q)

    q = bsub.add_parser("ls", help="list blobs")
    client_args(q)
    _filter_args(q)
    q.add_argument("--long", "-l", action="store_true", help="hash, tags, spaces too")

    q = bsub.add_parser("rm", help="delete blobs")
    client_args(q)
    q.add_argument("keys", nargs="+")

    q = bsub.add_parser("search", help="blobs whose embedding is nearest a query")
    client_args(q)
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="a text query (the daemon's text embedder)")
    src.add_argument("--vector", help="a query vector: comma-separated floats")
    src.add_argument("--vector-file", help=".npy of one query vector")
    q.add_argument("--space", default="", help="embedding space of a vector query")
    q.add_argument("-k", type=int, default=10)
    q.add_argument("--metric", choices=["cosine", "l2", "dot"], default="cosine")
    _filter_args(q)

    p = sub.add_parser("import", help="store every file under a folder as blobs (resumable)")
    client_args(p)
    p.add_argument("dir")
    p.add_argument("--prefix", default="", help="key prefix, e.g. photos/ (default: none)")
    _meta_args(p, media_type=False)
    p.add_argument("--state", default=None, help="resume state file (default: under ~/.cache)")
    _progress_args(p)

    p = sub.add_parser("export", help="write blobs under a prefix to a folder (resumable)")
    client_args(p)
    p.add_argument("dir")
    p.add_argument("--prefix", default="", help="only blobs whose key starts with this")
    _progress_args(p)


def _meta_args(q: argparse.ArgumentParser, *, media_type: bool = True) -> None:
    if media_type:
        q.add_argument("--media-type", "-t", default="", help="default: guessed from the name")
    q.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")


def _filter_args(q: argparse.ArgumentParser) -> None:
    q.add_argument("--prefix", default="", help="key prefix")
    q.add_argument("--media-type", default="")
    q.add_argument("--tag", action="append", default=[], help="must carry this tag (repeatable)")
    q.add_argument("--any-tag", action="append", default=[], help="carries one of these")
    q.add_argument("--session", default="")


def _progress_args(q: argparse.ArgumentParser) -> None:
    q.add_argument("--progress", dest="progress", action="store_true", default=None)
    q.add_argument("--no-progress", dest="progress", action="store_false")


# -- progress --------------------------------------------------------------------------
def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class ProgressBar:
    """A one-line progress bar on stderr: bytes, files, rate."""

    total_bytes: int
    total_files: int = 1
    out: IO[str] | None = None
    width: int = 30
    done_bytes: int = 0
    done_files: int = 0
    _started: float = field(default_factory=time.monotonic)
    _drawn: float = 0.0

    def advance(self, nbytes: int) -> None:
        self.done_bytes += nbytes
        self.draw()

    def file_done(self) -> None:
        self.done_files += 1
        self.draw(force=True)

    def draw(self, force: bool = False) -> None:
        if self.out is None:
            return
        now = time.monotonic()
        if not force and now - self._drawn < REDRAW_S:
            return
        self._drawn = now
        frac = self.done_bytes / self.total_bytes if self.total_bytes else 1.0
        filled = int(self.width * min(1.0, frac))
        rate = self.done_bytes / max(now - self._started, 1e-9)
        files = f" {self.done_files}/{self.total_files} files" if self.total_files > 1 else ""
        self.out.write(
            f"\r[{'#' * filled}{'.' * (self.width - filled)}] {frac * 100:5.1f}% "
            f"{human(self.done_bytes)}/{human(self.total_bytes)}{files} {human(rate)}/s "
        )
        self.out.flush()

    def close(self) -> None:
        if self.out is not None:
            self.draw(force=True)
            self.out.write("\n")
            self.out.flush()


def progress_bar(args: argparse.Namespace, total: int, files: int = 1) -> ProgressBar:
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    return ProgressBar(total, files, sys.stderr if show else None)


# -- helpers ---------------------------------------------------------------------------
def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> bytes:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(READ_BYTES):
            h.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return h.digest()


def guess_media_type(name: str) -> str:
    media_type, _ = mimetypes.guess_type(name, strict=False)
    return media_type or "application/octet-stream"


def parse_embedding(spec: str) -> tuple[str, Any]:
    import numpy as np

    space, sep, value = spec.partition("=")
    if not sep or not space or not value:
        raise ValueError(f"--embedding {spec!r}: use SPACE=V1,V2,... or SPACE=@FILE.npy")
    if value.startswith("@"):
        return space, np.load(value[1:]).astype(np.float32).ravel()
    return space, np.array([float(x) for x in value.split(",")], dtype=np.float32)


def _query(args: argparse.Namespace) -> Any:
    import numpy as np

    if args.vector_file:
        return np.load(args.vector_file).astype(np.float32).ravel()
    if args.vector:
        return np.array([float(x) for x in args.vector.split(",")], dtype=np.float32)
    return None


def _line(info: BlobInfo, long: bool) -> str:
    base = f"{info.size_bytes:>12} {info.media_type or '-':<24} {info.key}"
    if not long:
        return base
    tags = ",".join(info.tags) or "-"
    spaces = ",".join(info.embedding_spaces) or "-"
    return (
        f"{base}  sha256={info.sha256.hex()} refs={info.content_refs} tags={tags} spaces={spaces}"
    )


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "prefix": args.prefix,
        "media_type": args.media_type,
        "tags_all": args.tag,
        "tags_any": args.any_tag,
        "session": args.session,
    }


# -- blob subcommands --------------------------------------------------------------------
def run(args: argparse.Namespace, client: Client) -> int:
    if args.command == "import":
        return import_dir(client, Path(args.dir), args)
    if args.command == "export":
        return export_dir(client, Path(args.dir), args)
    cmd = args.blob_command
    blobs = client.blobs
    if cmd == "put":
        source: Any = sys.stdin.buffer if args.file == "-" else Path(args.file)
        key = args.key or (Path(args.file).name if args.file != "-" else None)
        if not key:
            print("tiermem: a key is needed when reading stdin", file=sys.stderr)
            return 2
        embeddings = dict(parse_embedding(e) for e in args.embedding)
        size = source.stat().st_size if isinstance(source, Path) else 0
        bar = progress_bar(args, size)
        try:
            info = blobs.put(
                key, source, media_type=args.media_type or guess_media_type(key),
                tags=args.tag, embeddings=embeddings, session=args.session,
                progress=bar.advance,
            )  # fmt: skip
        finally:
            bar.close()
        print(
            f"stored {info.namespace}/{info.key}: {info.size_bytes} bytes, "
            f"sha256 {info.sha256.hex()}, version {info.version}, "
            f"{info.content_refs} reference(s) to its content"
        )
    elif cmd == "get":
        size = args.length or max(0, blobs.stat(args.key).size_bytes - args.offset)
        bar = progress_bar(args, size)
        try:
            if args.output == "-":
                out = sys.stdout.buffer
                blobs.get(args.key, out, offset=args.offset, length=args.length,
                          progress=bar.advance)  # fmt: skip
                out.flush()
            else:
                blobs.get(args.key, args.output, offset=args.offset, length=args.length,
                          progress=bar.advance)  # fmt: skip
        finally:
            bar.close()
    elif cmd == "ls":
        for info in blobs.list(**_filters(args)):
            print(_line(info, args.long))
    elif cmd == "rm":
        missing = 0
        for key in args.keys:
            if blobs.delete(key):
                print(f"deleted {key}")
            else:
                print(f"tiermem: blob {key} not found", file=sys.stderr)
                missing += 1
        return 1 if missing else 0
    elif cmd == "search":
        hits = blobs.search(
            vector=_query(args), text=args.text, space=args.space, k=args.k,
            metric=args.metric, **_filters(args),
        )  # fmt: skip
        for hit in hits:
            print(f"{hit.distance:10.4f}  {_line(hit.info, False)}")
    return 0


# -- import / export ---------------------------------------------------------------------
def _files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                yield path


def _default_state(root: Path, args: argparse.Namespace) -> Path:
    ident = f"{root.resolve()}|{args.addr}|{args.namespace}|{args.prefix}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tiermem" / f"import-{digest}.json"


class ImportState:
    """Upload ids in flight per key, so a rerun resumes instead of restarting."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.uploads: dict[str, dict[str, Any]] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.uploads = {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.uploads))
        tmp.replace(self.path)

    def remember(self, key: str, stat: os.stat_result, upload_id: str) -> None:
        self.uploads[key] = {"upload_id": upload_id, "size": stat.st_size,
                             "mtime_ns": stat.st_mtime_ns}  # fmt: skip
        self.save()

    def forget(self, key: str) -> None:
        if self.uploads.pop(key, None) is not None:
            self.save()

    def pending(self, key: str, stat: os.stat_result) -> str | None:
        entry = self.uploads.get(key)
        if entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns:
            return str(entry["upload_id"])
        return None


def import_dir(client: Client, root: Path, args: argparse.Namespace) -> int:
    from tiermem.client.errors import NotFoundError, TiermemClientError

    if not root.is_dir():
        print(f"tiermem: {root} is not a folder", file=sys.stderr)
        return 2
    files = list(_files(root))
    total = sum(p.stat().st_size for p in files)
    state = ImportState(Path(args.state) if args.state else _default_state(root, args))
    bar = progress_bar(args, total, len(files))
    stored = skipped = 0
    try:
        for path in files:
            key = args.prefix + path.relative_to(root).as_posix()
            stat = path.stat()
            # the hash first: files already stored are skipped, known contents are
            # referenced without sending their bytes, and the daemon checks it
            sha = sha256_file(path)
            try:
                existing = client.blobs.stat(key)
            except NotFoundError:
                existing = None
            if existing is not None and existing.sha256 == sha:
                skipped += 1
                bar.advance(stat.st_size)
                bar.file_done()
                continue
            info = None
            upload_id = state.pending(key, stat)
            if upload_id is not None:
                try:
                    bar.advance(client.blobs.status(upload_id).acknowledged_offset)
                    info = client.blobs.resume(upload_id, path, progress=bar.advance)
                except TiermemClientError as exc:
                    if exc.code not in RESTART_CODES:
                        raise
                    state.forget(key)
            if info is None:
                info = client.blobs.put(
                    key, path, media_type=guess_media_type(path.name), tags=args.tag,
                    sha256=sha, progress=bar.advance,
                    on_upload_id=functools.partial(state.remember, key, stat),
                )  # fmt: skip
            state.forget(key)
            if info.sha256 != sha:
                raise TiermemClientError("DATA_LOSS", f"{key} was stored with another hash")
            stored += 1
            bar.file_done()
    finally:
        bar.close()
    if not state.uploads:
        state.path.unlink(missing_ok=True)
    print(f"imported {stored} file(s), {skipped} already stored, {human(total)} in all")
    return 0


def _safe_relative(key: str, prefix: str) -> PurePosixPath | None:
    rel = PurePosixPath(key[len(prefix) :].lstrip("/"))
    if not rel.parts or rel.is_absolute() or any(p in ("..", ".") for p in rel.parts):
        return None
    return rel


def export_dir(client: Client, root: Path, args: argparse.Namespace) -> int:
    blobs = list(client.blobs.list(prefix=args.prefix))
    total = sum(b.size_bytes for b in blobs)
    bar = progress_bar(args, total, len(blobs))
    written = skipped = refused = 0
    try:
        for info in blobs:
            rel = _safe_relative(info.key, args.prefix)
            if rel is None:
                print(f"\ntiermem: not exporting {info.key!r}: not a safe relative path",
                      file=sys.stderr)  # fmt: skip
                refused += 1
                bar.advance(info.size_bytes)
                continue
            dest = root.joinpath(*rel.parts)
            if (
                dest.is_file()
                and dest.stat().st_size == info.size_bytes
                and sha256_file(dest) == info.sha256
            ):
                skipped += 1
                bar.advance(info.size_bytes)
                bar.file_done()
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            # written to <dest>.part, checked against the blob's SHA-256, then renamed
            client.blobs.get(info.key, dest, verify="sha256", progress=bar.advance)
            written += 1
            bar.file_done()
    finally:
        bar.close()
    print(f"exported {written} blob(s), {skipped} already present, {human(total)} in all")
    return 1 if refused else 0
