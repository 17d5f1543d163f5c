"""A batch's part in keeping its tables the mirror of their buckets (docs/mirror.md).

For the tables that mirror (``on_overwrite`` replace or tail, ``on_delete`` retract), the batch:

1. plans against the key index (:mod:`glue_processor.keys`): one read for the batch's keys; what is
   not to be read (a duplicate, an earlier version) is recorded as such, and each later version
   names the rows it replaces (:mod:`glue_processor.plan.mirror`);
2. rewrites, in Spark tasks, the files that hold those rows, without them
   (:mod:`glue_processor.write.rewrite`), found through the table's own metadata
   (:mod:`glue_processor.table.locate`); the share's record lists the versions and the rewrites;
3. once a share is published (its rows in, the replaced ones out, in one commit:
   :mod:`glue_processor.table.replace`), writes its keys' new states.

The index's dedupe replaces the dedupe window for these tables: a key's state says which bytes of it
are loaded, whenever they were.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts.exceptions import ConfigError
from contracts.ledger import CommitRecord, PublishedFile, Replaced, Rewrite, SourceRecord
from glue_processor import faults
from glue_processor.commit.after_load import whole
from glue_processor.keys.state import MAX_SEGMENTS, KeyState, Segment
from glue_processor.keys.store import Ident, KeyIndex, open_index
from glue_processor.plan.manifests import BatchPlan, IngestedLookup, SourceFile
from glue_processor.plan.mirror import KEEPS, RETRACTS, Replacement, classify
from glue_processor.plan.routes import Routes
from glue_processor.plan.sizing import plan_groups
from glue_processor.plan.tasks import SparkMap
from glue_processor.read.fingerprint import PrintTask, text_print
from glue_processor.settings import JobSettings
from glue_processor.table.datafiles import WrittenFile
from glue_processor.table.replace import removals
from glue_processor.table.sink import Tables
from glue_processor.write.rewrite import RewriteSpec, rewrite_all

logger = logging.getLogger(__name__)


@dataclass
class ShareRemovals:
    """What one table's share removes: the versions, the rewrites, the statistics of the new files."""

    replaced: tuple[Replaced, ...] = ()
    rewrites: tuple[Rewrite, ...] = ()
    written: dict[str, WrittenFile] = field(default_factory=dict)


class Mirror:
    def __init__(self, settings: JobSettings, routes: Routes, *, index: KeyIndex | None = None) -> None:
        self.settings, self.routes = settings, routes
        self.tables = {name for name, c in routes.tables.items() if c.mirrors}
        self.index: KeyIndex | None = None
        self._inner: IngestedLookup | None = None  # the dedupe window (see window())
        # the files that hold each admitted replacement's rows (table, bucket, key) -> path -> bytes,
        # as the plan found them
        self._located: dict[tuple[str, str, str], dict[str, int]] = {}
        if self.tables:
            try:
                self.index = index or open_index(settings.key_index_uri)
            except ValueError as exc:
                raise ConfigError(f"--key_index: {exc}") from exc

    # -- plan ---------------------------------------------------------------------------------
    def window(self, inner: IngestedLookup) -> IngestedLookup:
        """The dedupe window, for the tables that do not mirror (for those that do, the index says,
        and the window only for a key the index does not know: see :meth:`plan`)."""
        self._inner = inner
        return _Window(inner, self._mirrored_key) if self.tables else inner

    def _mirrored_key(self, key: str) -> bool:
        table = self.routes.table_of(key)
        return table is not None and self.routes.name(table) in self.tables

    def plan(
        self, plan: BatchPlan, tables: Tables | None = None, *, spark_map: SparkMap | None = None
    ) -> dict[str, list[Replacement]]:
        """Narrow ``plan`` to what is to be read; the versions each table's share replaces or retracts.
        A deletion is never read: on a table that does not retract, it is recorded and changes nothing.
        With ``tables``, the files to rewrite are found now, and what would take the batch past
        ``--max_rewrite_mb_per_batch`` is carried over (:meth:`_bound`). With ``spark_map``, the
        objects of tail tables get their text prints, and a version that extends the one loaded is
        read from where that one ended (:meth:`_tails`)."""
        self._located = {}
        self._archived(plan)
        by_table = plan.by_table()
        removed: dict[str, list[SourceFile]] = {}
        for f in plan.removals:
            if self.index is not None and self.routes.name(f.table) in self.tables:
                removed.setdefault(f.table, []).append(f)
            else:
                plan.skipped.append((f, "deleted", KEEPS))
        plan.removals = []
        if self.index is None:
            return {}
        mirrored = {t: files for t, files in by_table.items() if self.routes.name(t) in self.tables}
        for t in removed:
            mirrored.setdefault(t, [])
        if not mirrored:
            return {}
        idents = [
            (self.routes.name(t), f.entry.bucket, f.entry.key)
            for t, files in mirrored.items()
            for f in [*files, *removed.get(t, [])]
        ]
        states = self.index.get(idents)
        self._known_to_window(plan, mirrored, states)
        read: set[int] = set()
        replacing: dict[str, list[Replacement]] = {}
        for t, files in mirrored.items():
            config = self.routes.tables[self.routes.name(t)]
            decided = classify(
                self.routes.name(t),
                files,
                states,
                removals=removed.get(t, []),
                retract=config.on_delete == "retract",
            )
            read.update(id(f) for f in decided.load)
            plan.skipped.extend(decided.skipped)
            kept = [r for r in decided.replacing if r.retracts or config.on_overwrite != "append"]
            if kept:
                replacing[t] = kept
        plan.files = [f for f in plan.files if f.table not in mirrored or id(f) in read]
        if tables is not None and replacing:
            replacing = self._bound(plan, replacing, tables)
        if spark_map is not None:
            replacing = self._tails(plan, replacing, spark_map)
        return replacing

    def _archived(self, plan: BatchPlan) -> None:
        """What after_load archived is never loaded again (a landing prefix that holds the archive
        prefix would send it back: a loop): recorded as ignored."""
        prefix = self.settings.archive_prefix
        archiving = {n for n, c in self.routes.tables.items() if c.after_load == "archive"}
        if not archiving:
            return
        back = [f for f in plan.files if self.routes.name(f.table) in archiving and f.entry.key.startswith(prefix)]
        if back:
            gone = {id(f) for f in back}
            plan.files = [f for f in plan.files if id(f) not in gone]
            plan.skipped += [(f, "ignored", f"under --archive_prefix {prefix}: archived by after_load") for f in back]

    def _tails(
        self, plan: BatchPlan, replacing: dict[str, list[Replacement]], spark_map: SparkMap
    ) -> dict[str, list[Replacement]]:
        """Each object of a tail table gets its text print (one Spark task each, on every core). A
        later version whose first bytes are the loaded version's through its last line end (hashed,
        compared) is read from there on, its lines numbered on; the loaded version's rows stay, but
        for a torn last line's, which the extended line replaces. Any other is replaced whole."""
        tails = {t for t in {f.table for f in plan.files} if self._on_overwrite(t) == "tail"}
        if not tails:
            return replacing
        states = {
            (r.source.entry.bucket, r.source.entry.key, r.source.entry.etag): r
            for t in tails
            for r in replacing.get(t, [])
            if not r.retracts
        }
        tasks: list[PrintTask] = []
        files: list[SourceFile] = []
        for f in plan.files:
            if f.table not in tails:
                continue
            r = states.get(f.entry.identity)
            state = r.state if r is not None else None
            check = state is not None and _extendable(state, f.entry.size)
            tasks.append(
                PrintTask(
                    item=len(files),
                    read_uri=f.read_uri,
                    etag=f.entry.etag,
                    event_time=f.entry.event_time,
                    version_id=f.entry.version_id,
                    check_bytes=state.text_bytes if check and state is not None else 0,
                    check_sha256=state.prefix_sha256 if check and state is not None else "",
                )
            )
            files.append(f)
        printed = {p.item: p for p in spark_map(text_print, tasks)}
        swapped: dict[int, SourceFile] = {}
        extended: dict[int, KeyState] = {}
        for n, f in enumerate(files):
            found = printed.get(n)
            if found is None or found.text is None:
                continue
            r = states.get(f.entry.identity)
            if found.extends and r is not None:
                swapped[id(f)] = dataclasses.replace(
                    f, text=found.text, tail_from=r.state.text_bytes, tail_line=r.state.lines + 1
                )
                extended[id(f)] = r.state
            else:
                swapped[id(f)] = dataclasses.replace(f, text=found.text)
        plan.files = [swapped.get(id(f), f) for f in plan.files]
        out: dict[str, list[Replacement]] = {}
        for t, reps in replacing.items():
            for r in reps:
                new = swapped.get(id(r.source), r.source)
                state = extended.get(id(r.source))
                if state is None:
                    out.setdefault(t, []).append(dataclasses.replace(r, source=new))
                elif state.torn:  # the torn last line is read again, whole: a row it left goes
                    out.setdefault(t, []).append(dataclasses.replace(r, source=new, from_line=state.lines + 1))
        return out

    def _on_overwrite(self, table: str) -> str | None:
        config = self.routes.tables.get(self.routes.name(table))
        return None if config is None else config.on_overwrite

    def _known_to_window(
        self, plan: BatchPlan, mirrored: dict[str, list[SourceFile]], states: Mapping[Ident, KeyState]
    ) -> None:
        """An object version the key index does not know, but the dedupe window does, is a duplicate:
        a redelivered event of a version loaded before its table had an index (a table loaded by an
        earlier build), within the window, as it always was."""
        if self._inner is None:
            return
        unknown = [
            f
            for t, files in mirrored.items()
            for f in files
            if (self.routes.name(t), f.entry.bucket, f.entry.key) not in states
        ]
        if not unknown:
            return
        found = self._inner.lookup([f.entry.identity for f in unknown])
        dup = {id(f): b for f, b in zip(unknown, found, strict=True) if b is not None}
        if not dup:
            return
        for t, files in mirrored.items():
            mirrored[t] = [f for f in files if id(f) not in dup]
        plan.files = [f for f in plan.files if id(f) not in dup]
        plan.skipped += [(f, "duplicate", f"already ingested by batch {dup[id(f)]}") for f in unknown if id(f) in dup]

    def _bound(
        self, plan: BatchPlan, replacing: dict[str, list[Replacement]], tables: Tables
    ) -> dict[str, list[Replacement]]:
        """The replacements whose files fit ``--max_rewrite_mb_per_batch`` together, in batch order
        (the first always: a batch always makes progress). The others are carried over: their
        objects are not read (a deletion not applied) and go to the next batch in a manifest of their
        own (:attr:`BatchPlan.carried`), so nothing is lost and no version's rows are half replaced."""
        bound = self.settings.max_rewrite_mb_per_batch * 1024 * 1024
        chosen: dict[str, int] = {}  # file path -> bytes, over every table's admitted replacements
        admitted: dict[str, list[Replacement]] = {}
        carried: set[int] = set()
        for t, reps in replacing.items():
            # one scan of the table for every replacement of the batch, not one a key
            located = tables.sink(t).files_of_each({id(r): r.state.segments for r in reps})
            for r in reps:
                files = located[id(r)]
                more = sum(size for path, size in files.items() if path not in chosen)
                if chosen and sum(chosen.values()) + more > bound:
                    carried.add(id(r.source))
                    continue
                chosen.update(files)
                self._located[(t, r.state.bucket, r.state.key)] = files
                admitted.setdefault(t, []).append(r)
        if carried:
            why = (
                f"carried to a later batch: this batch's rewrites reached --max_rewrite_mb_per_batch "
                f"({self.settings.max_rewrite_mb_per_batch} MiB)"
            )
            plan.files = [f for f in plan.files if id(f) not in carried]
            plan.skipped = [x for x in plan.skipped if id(x[0]) not in carried]
            plan.carried += [r.source for reps in replacing.values() for r in reps if id(r.source) in carried]
            plan.carried_reason = why
            logger.warning("objects carried to a later batch past the rewrite bound", extra={"objects": len(carried)})
        return admitted

    # -- write --------------------------------------------------------------------------------
    def rewrite(
        self,
        tables: Tables,
        shares: Sequence[Any],
        replacing: Mapping[str, list[Replacement]],
        *,
        name_of: Callable[[Any, int], str],
        spark_map: Callable[[Any, Sequence[Any]], list[Any]],
        cores: int,
    ) -> dict[str, ShareRemovals]:
        """For each share that replaces versions: the files holding their rows, rewritten without them
        (one Spark job for every table's files, at most a task per core)."""
        out: dict[str, ShareRemovals] = {}
        specs: list[tuple[str, RewriteSpec]] = []
        for share in shares:
            # a later version that was not loaded after all (gone, overwritten again, unreadable) replaces
            # nothing: the rows it would replace stay until a version of the key is loaded
            loaded = {(x.bucket, x.key, x.etag) for x in share.outcome.sources if x.status in ("ingested", "empty")}
            reps = [
                r
                for r in replacing.get(share.config.name, [])
                if r.retracts or (r.source.entry.bucket, r.source.entry.key, r.source.entry.etag) in loaded
            ]
            if not reps:
                continue
            replaced = tuple(_replaced(r) for r in reps)
            out[share.config.name] = ShareRemovals(replaced=replaced)
            gone = removals(replaced)
            if not gone:
                continue
            located = self._files_of(share, reps)
            stats = share.sink.stats_plan(share.outcome.final_keys, share.config.declared)
            for n, (path, size) in enumerate(sorted(located.items())):
                spec = RewriteSpec(path, size, gone, name_of(share, n), stats)
                specs.append((share.config.name, spec))
        if not specs:
            return out
        groups = plan_groups([s.old_bytes for _, s in specs], max(1, cores))
        results = spark_map(rewrite_all, [[specs[i][1] for i in g] for g in groups])
        for g, done in zip(groups, results, strict=True):
            for i, result in zip(g, done, strict=True):
                if not result.rows_removed:
                    continue
                table = specs[i][0]
                removed = out[table]
                new = result.new
                published = PublishedFile(staged=new.uri, final=new.uri, bytes=new.bytes) if new else None
                removed.rewrites += (
                    Rewrite(
                        old=result.old, new=published, rows_removed=result.rows_removed, old_bytes=result.old_bytes
                    ),
                )
                if new is not None and new.footer:
                    removed.written[new.uri] = WrittenFile(new.footer, new.stats)
        return out

    def _files_of(self, share: Any, reps: Sequence[Replacement]) -> dict[str, int]:
        """(path -> bytes) of the data files holding the rows of ``reps``: as the plan found them, else
        found now (a replay, or a plan made without the tables)."""
        keys = [(share.config.name, r.state.bucket, r.state.key) for r in reps]
        if all(k in self._located for k in keys):
            return {path: size for k in keys for path, size in self._located[k].items()}
        found = share.sink.files_holding([s for r in reps for s in r.state.segments])
        return {str(f.file_path): int(f.file_size_in_bytes) for f in found}

    # -- after the commit ---------------------------------------------------------------------
    def unarchive(self, table: str, sources: Sequence[SourceRecord]) -> None:
        """Keys after_load could not move: not archived after all (a later deletion of one is the
        user's own)."""
        name = self.routes.name(table)
        if self.index is None or name not in self.tables or not sources:
            return
        states = self.index.get([(name, s.bucket, s.key) for s in sources])
        self.index.put(_unarchived(states, sources))

    def remember(self, tables: Tables, record: CommitRecord, table: str, snapshot: int | None) -> None:
        """The new states of the keys a published share loaded (idempotent: a replay writes the same)."""
        name = self.routes.name(table)
        if self.index is None or name not in self.tables:
            return
        share = record.share(table)
        if share is None:
            return
        faults.hit("before-key-index")  # published, its keys' states not yet written
        sources = record.loaded_by(share)
        retracted = [
            s for s in record.sources if s.status == "deleted" and s.table == share.table and s.reason == RETRACTS
        ]
        self.index.put(_state(name, s, retracted=True) for s in retracted)
        if not sources:
            return
        partitions = tables.sink(table).added_partitions(snapshot) if snapshot is not None else ()
        segment = Segment(query_id=record.query_id, batch_id=record.batch_id, partitions=partitions)
        # (a tail's segment starts at its first line: its rows are the lines it added)
        config = self.routes.tables.get(name)
        keep_old = config is not None and config.on_overwrite == "append"  # both versions' rows stay
        # a tail's rows join the loaded version's: both stay
        kept = [s for s in sources if keep_old or s.from_line > 1]
        before = self.index.get([(name, s.bucket, s.key) for s in kept]) if kept else {}
        states = []
        for s in sources:
            old = before.get((name, s.bucket, s.key)) if keep_old or s.from_line > 1 else None
            earlier = old.segments if old is not None and not old.retracted else ()
            # a replay of this batch finds its own segment already there: written once
            mine = any((x.query_id, x.batch_id) == (segment.query_id, segment.batch_id) for x in earlier)
            own = segment if s.from_line == 1 else segment.model_copy(update={"from_line": s.from_line})
            segments = earlier if mine else (*earlier, own)
            states.append(
                _state(
                    name,
                    s,
                    segments=_bounded(segments),
                    lines=s.text.lines if s.text is not None else s.records + s.bad_records,
                    text_bytes=s.text.end if s.text is not None else 0,
                    prefix_sha256=s.text.sha256 if s.text is not None else "",
                    torn=s.text.torn if s.text is not None else False,
                    archived=config is not None
                    and config.after_load != "keep"
                    and whole(s)
                    and not s.key.startswith(self.settings.archive_prefix),
                )
            )
        self.index.put(states)


def _unarchived(states: Mapping[Ident, KeyState], sources: Sequence[SourceRecord]) -> list[KeyState]:
    by_ident = {(s.bucket, s.key): s.etag for s in sources}
    return [
        st.model_copy(update={"archived": False})
        for (_, bucket, key), st in states.items()
        if st.archived and by_ident.get((bucket, key)) == st.etag
    ]


def _replaced(r: Replacement) -> Replaced:
    state, entry = r.state, r.source.entry
    segments = state.segments
    known = all(s.partitions for s in segments)
    return Replaced(
        bucket=state.bucket,
        key=state.key,
        etag=state.etag,
        version_id=state.version_id,
        status="retracted" if r.retracts else "replaced",
        by_etag=None if r.retracts else entry.etag,
        by_version_id=None if r.retracts else entry.version_id,
        batches=tuple(sorted({s.batch_id for s in segments})),
        partitions=tuple(sorted({p for s in segments for p in s.partitions})) if known else (),
        from_line=r.from_line,
    )


def _extendable(state: KeyState, size: int) -> bool:
    """Whether a later version of ``size`` bytes may extend the loaded version: that one's text print
    is kept, the new one is at least as long, and the key's rows are in fewer segments than the
    bound (past it the version is read whole, its rows gathered into one segment again)."""
    return (
        not state.retracted
        and state.text_bytes > 0
        and bool(state.prefix_sha256)
        and size >= state.text_bytes
        and len(state.segments) < MAX_SEGMENTS
    )


def _state(table: str, source: SourceRecord, **state: Any) -> KeyState:
    """A key's state as ``source`` (the version a batch loaded or retracted) leaves it."""
    return KeyState(
        table=table,
        bucket=source.bucket,
        key=source.key,
        version_id=source.version_id,
        etag=source.etag,
        sequencer=source.sequencer,
        event_time=source.event_time,
        **state,
    )


def _bounded(segments: tuple[Segment, ...]) -> tuple[Segment, ...]:
    """At most MAX_SEGMENTS (the oldest dropped: an append table's rows of the dropped batches stay,
    a later delete does not find them; stated in docs/mirror.md)."""
    return segments[-MAX_SEGMENTS:]


class _Window:
    """The dedupe window, blind to the keys of mirroring tables."""

    def __init__(self, inner: IngestedLookup, mirrored: Callable[[str], bool]) -> None:
        self.inner, self.mirrored = inner, mirrored

    def lookup(self, identities: Sequence[Sequence[str]]) -> list[int | None]:
        found = self.inner.lookup(identities)
        return [None if self.mirrored(i[1]) else b for i, b in zip(identities, found, strict=True)]
