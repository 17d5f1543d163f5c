"""Which objects of a mirroring table's share to load, and whose rows they replace (pure: no I/O).

A table that mirrors its bucket (``on_overwrite`` replace or tail, ``on_delete`` retract: see
docs/mirror.md) knows each key's loaded version (:mod:`glue_processor.keys`). Against it, each
object version of a batch is:

- new (no version of its key loaded, or only a deletion older than it): loaded;
- later than the one loaded: loaded, and the loaded one's rows go in the same commit (replace);
- the one loaded, or the same bytes uploaded again (its eTag): a duplicate, not read;
- earlier than the one loaded, or than a deletion (an event that arrived out of order): superseded,
  not read: it never replaces a later version's rows.

A deletion of a key (a removed entry) on a table that retracts is one more version: the latest, it
retracts the loaded version's rows (a tombstone then orders later events); earlier than the loaded
version, it is superseded. On a table that keeps, a deletion changes nothing.

Of several versions of one key in a batch only the latest is read; the others are superseded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from glue_processor.keys.state import KeyState, later
from glue_processor.plan.manifests import SourceFile

Ident = tuple[str, str, str]


RETRACTS = "deleted from the bucket: its rows are removed (on_delete: retract)"
KEEPS = "deleted from the bucket: its rows stay (on_delete: keep)"


@dataclass(frozen=True)
class Replacement:
    """A later version (``source``) of a key whose loaded version's rows (``state``) it replaces, or
    retracts (``source`` is the key's deletion)."""

    source: SourceFile
    state: KeyState
    from_line: int = 1  # past 1: only the rows from this line on go (a tail over a torn last line)

    @property
    def retracts(self) -> bool:
        return self.source.entry.removed


@dataclass
class MirrorPlan:
    load: list[SourceFile] = field(default_factory=list)
    replacing: list[Replacement] = field(default_factory=list)
    skipped: list[tuple[SourceFile, str, str]] = field(default_factory=list)  # (object, status, reason)


def ident(table: str, source: SourceFile) -> Ident:
    return (table, source.entry.bucket, source.entry.key)


def classify(
    table: str,
    files: Sequence[SourceFile],
    states: Mapping[Ident, KeyState],
    *,
    removals: Sequence[SourceFile] = (),
    retract: bool = False,
) -> MirrorPlan:
    """``files`` (one table's share, batch order) and the deletions of its keys against the
    ``states`` of their keys; ``retract``: the table retracts a deleted key's rows."""
    plan = MirrorPlan()
    if not retract:
        plan.skipped += [(f, "deleted", KEEPS) for f in removals]
        removals = ()
    latest: dict[Ident, SourceFile] = {}
    for f in [*files, *removals]:
        key = ident(table, f)
        other = latest.get(key)
        if other is None or _after(f, other):
            if other is not None:
                plan.skipped.append((other, "superseded", "a later version of its key is in this batch"))
            latest[key] = f
        else:
            plan.skipped.append((f, "superseded", "a later version of its key is in this batch"))
    for f in [*files, *removals]:
        key = ident(table, f)
        if latest.get(key) is not f:
            continue
        state = states.get(key)
        e = f.entry
        if e.removed:
            _deletion(plan, f, state)
        elif state is None:
            plan.load.append(f)
        elif state.retracted:
            if later(e.sequencer, e.event_time, state.sequencer, state.event_time):
                plan.load.append(f)
            else:
                plan.skipped.append((f, "superseded", "its key was deleted after this version"))
        elif e.etag == state.etag:  # the same bytes (uploaded again, a redelivered event): nothing changes
            batch = f"by batch {state.segments[-1].batch_id}" if state.segments else "before"
            plan.skipped.append((f, "duplicate", f"already ingested {batch}: the same bytes (eTag) of its key"))
        elif later(e.sequencer, e.event_time, state.sequencer, state.event_time):
            plan.load.append(f)
            plan.replacing.append(Replacement(f, state))
        else:
            why = f"an earlier version than the one loaded ({_version(state)}): it replaces nothing"
            plan.skipped.append((f, "superseded", why))
    return plan


def _deletion(plan: MirrorPlan, f: SourceFile, state: KeyState | None) -> None:
    e = f.entry
    if state is None or state.retracted:
        plan.skipped.append((f, "deleted", "deleted from the bucket: no version of it is in the table"))
    elif e.version_id is not None and state.version_id is not None and e.version_id != state.version_id:
        # a version removed for good that is not the one loaded (a noncurrent one): the key is still there
        why = f"version {e.version_id} was deleted, not the one loaded ({state.version_id}): its rows stay"
        plan.skipped.append((f, "deleted", why))
    elif state.archived:
        plan.skipped.append((f, "deleted", "moved or deleted by after_load once loaded: its rows stay"))
    elif later(e.sequencer, e.event_time, state.sequencer, state.event_time):
        plan.skipped.append((f, "deleted", RETRACTS))
        plan.replacing.append(Replacement(f, state))
    else:
        why = f"a deletion older than the version loaded ({_version(state)}): it retracts nothing"
        plan.skipped.append((f, "superseded", why))


def _after(a: SourceFile, b: SourceFile) -> bool:
    return later(a.entry.sequencer, a.entry.event_time, b.entry.sequencer, b.entry.event_time)


def _version(state: KeyState) -> str:
    return f"version {state.version_id}" if state.version_id else f"eTag {state.etag}"
