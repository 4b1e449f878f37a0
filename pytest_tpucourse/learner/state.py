"""The learner's state file: `.tpucourse/state.json` at the course root.

It holds what pytest runs observed about the learner's own exercises (never a
--solutions or --impl-root run), how many hints of each exercise were shown, and
the self-test items the learner ticked (`tpucourse tick`: their word, not a test's).
`tpucourse progress`, `hint` and `watch` read it.

Every change is read-modify-write under an exclusive lock (`.tpucourse/state.lock`),
so concurrent runs and pytest-xdist never lose an update, and is written to a
temporary file, fsynced, then renamed over the old one: a run killed mid-write
leaves either the old file or the new one, never half of one (and the temporary
file it left is removed by the next update, under the lock).

Each exercise entry a run writes names its run (`run`, listed under "runs"), the sha256 of
the graded test files it ran, of the module bytes it imported and of every file of the tree its
graded modules ran (`unit`: grading/unit_files.py; any of them changed, the entry reads
"changed"), its counts, and a seal over all of those. A done entry that does not add up (no such
run, counts that are not a pass, a seal that does not match: an entry written by hand) is "not
counted" (docs/earned.md).

A done entry says what the learner's own run saw, in the process their code ran in, which that
code can lie to. `confirmed` holds, per exercise, the trusted check's verdict on the module bytes
it was given (`tpucourse confirm chNN`, `pytest --isolated`: values judged outside that process,
docs/grading.md), sealed as entries are: `confirmation` says whether a done exercise is confirmed,
disagreed with, or done by the learner's own run only; a confirmation holds the unit it was
given, and confirms an entry whose unit lies within it, unchanged. `solutions_read` keeps, sealed,
which solutions `tpucourse solution` showed, and when; the exercise's entries carry that mark's
seal, so that a mark removed by hand reads "tampered".
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import tempfile
from pathlib import Path

from ..core import untrusted_json
from ..core.course import EXERCISES
from ..core.small_files import UnreadableFile, read_text
from .status import Confirmation, Status

STATE_DIR = ".tpucourse"
STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
VERSION = 1
MAX_BYTES = 8 * 1024 * 1024  # a state file is a few kB; anything this big is not one
STATE_DEPTH = 16  # a state file nests 5 deep (exercises, an exercise, its test files)
RUNS_KEPT = 50  # runs listed in the state file besides those its entries name

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class CorruptState(Exception):
    """The state file exists but is not a state file this version can read."""


def state_path(course_root: Path) -> Path:
    return Path(course_root) / STATE_DIR / STATE_FILE


def empty() -> dict:
    return {"version": VERSION, "exercises": {}, "hints": {}, "ticks": {}, "runs": {}}


def read(course_root: Path) -> dict:
    """The state, or an empty one when no run has written it yet."""
    path = state_path(course_root)
    try:
        text = read_text(path, MAX_BYTES)
    except UnreadableFile as error:
        raise CorruptState(f"{error}; delete it to start afresh") from None
    if text is None:
        return empty()
    try:
        data = untrusted_json.loads(text, depth=STATE_DEPTH)
    except untrusted_json.JsonError as error:
        raise CorruptState(f"{path} is not valid JSON ({error}); delete it to start afresh") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise CorruptState(f"{path} is not a version-{VERSION} tpucourse state file; delete it to start afresh")
    data.setdefault("exercises", {})
    data.setdefault("hints", {})
    data.setdefault("ticks", {})
    data.setdefault("runs", {})
    data.setdefault("confirmed", {})
    statuses = {status.value for status in Status}
    if not (isinstance(data["exercises"], dict)
            and all(isinstance(e, dict) and e.get("status") in statuses for e in data["exercises"].values())
            and isinstance(data["hints"], dict)
            and all(isinstance(n, int) and not isinstance(n, bool) for n in data["hints"].values())
            and isinstance(data["ticks"], dict)
            and all(isinstance(items, list) for items in data["ticks"].values())
            and isinstance(data["runs"], dict)
            and isinstance(data["confirmed"], dict)
            and all(isinstance(c, dict) for c in data["confirmed"].values())):
        raise CorruptState(f"{path} has fields of the wrong type (exercises, hints and ticks are objects); "
                           f"delete it to start afresh")
    return data


@contextlib.contextmanager
def _locked(course_root: Path):
    directory = Path(course_root) / STATE_DIR
    directory.mkdir(exist_ok=True)
    with open(directory / LOCK_FILE, "a+") as lock:
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader sees the old or the new file, whole."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def update(course_root: Path, change) -> dict:
    """Apply `change(state)` (it edits the dict in place) under the lock; return the new state."""
    with _locked(course_root):
        _remove_left_temporaries(Path(course_root) / STATE_DIR)
        data = read(course_root)
        change(data)
        atomic_write_text(state_path(course_root), json.dumps(data, indent=1, sort_keys=True) + "\n")
        return data


def _remove_left_temporaries(directory: Path) -> None:
    """Temporary state files a killed writer left (every writer holds the lock, so none is live)."""
    for left in directory.glob(f".{STATE_FILE}.*.tmp"):
        with contextlib.suppress(OSError):
            left.unlink()


def file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def record_results(course, results, run_id: str, imported: dict | None = None, *, worked_in,
                   units: dict | None = None) -> dict:
    """Store what a run of the learner's tree showed: {exercise key: ExerciseResults}, and the
    chapter the learner now works in: `worked_in(course, data, touched chapters)`, the rule of
    next_up.py (passed in: next_up reads this module).

    Exercises the run did not touch keep their earlier entry. A partial run (some
    tests not run, none failed) does not replace an earlier done: it neither shows
    the exercise complete nor shows it broken. imported: {module path: sha256 of the bytes
    this run imported}; a module the run did not import is hashed as it is now. units: {exercise
    key: {file relative to the course: sha256}}, every file its tests' graded modules ran
    (grading/unit_files.py): a done exercise is changed once any of them is.
    """
    stamp = now()
    imported, units = imported or {}, units or {}

    def change(data):
        touched = []
        for key, entry in results.items():
            status = entry.status
            if status == Status.NOT_RUN:
                continue
            if entry.exercise.chapter not in touched:
                touched.append(entry.exercise.chapter)
            previous = data["exercises"].get(key)
            if status == Status.PARTIAL and previous is not None and previous["status"] == Status.DONE:
                continue
            exercise = entry.exercise
            module = Path(course.root) / exercise.module_path
            written = {
                "status": status,
                "tree": EXERCISES,
                "tests_passed": len(entry.passed),
                "tests_skipped": len(entry.skipped),  # the course's own skips (no libtpu, too few devices)
                "tests_failed": len(entry.failed | entry.todo),
                "tests_total": len(entry.collected | entry.deselected),
                "message": (entry.not_counted if status == Status.NOT_COUNTED
                            else entry.first_message.removeprefix("TODO: ")),
                "module_sha256": imported.get(str(module.resolve())) or file_digest(module),
                "unit": dict(sorted(units.get(key, {}).items())),
                "test_files": dict(sorted(entry.test_files.items())),
                "tests_shipped": entry.tests_shipped,
                "run": run_id,
                "date": stamp,
            }
            written["unit"][exercise.module_path] = written["module_sha256"]
            if entry.compiler_unchecked:  # done, but its compiler checks could not run here
                written["compiler_unchecked"] = [len(entry.compiler_unchecked),
                                                 next(iter(entry.compiler_unchecked.values()))]
            _carry_solution_read(previous, written)
            written["seal"] = seal(key, written)
            data["exercises"][key] = written
        data["runs"][run_id] = {"date": stamp, "exercises": sorted(k for k, e in results.items()
                                                                   if e.status != Status.NOT_RUN)}
        _forget_old_runs(data)
        order = [c.id for c in course.chapters]
        chapter = worked_in(course, data, sorted(touched, key=order.index))
        if chapter is not None:
            data["working_chapter"] = chapter

    return update(course.root, change)


def seal(key: str, entry: dict) -> str:
    """What ties an entry to the run that wrote it: the sha256 of its fields, the key included."""
    fields = {name: value for name, value in entry.items() if name != "seal"}
    return hashlib.sha256(json.dumps([key, fields], sort_keys=True).encode()).hexdigest()


def _forget_old_runs(data: dict) -> None:
    named = {entry.get("run") for entry in data["exercises"].values()}
    runs = sorted(data["runs"].items(), key=lambda item: str(item[1].get("date", "")))
    for run_id, _ in runs[:-RUNS_KEPT]:
        if run_id not in named:
            del data["runs"][run_id]


def why_not_from_a_run(data: dict, key: str) -> str | None:
    """Why a done entry does not add up to a run that passed every test (None: it does)."""
    entry = data["exercises"].get(key)
    if entry is None or entry.get("status") != Status.DONE:
        return None
    run = data["runs"].get(entry.get("run"))
    if not isinstance(run, dict) or key not in run.get("exercises", ()):
        return "no run of its tests wrote it"
    if entry.get("seal") != seal(key, entry):
        return "it was changed after its run wrote it"
    total, passed, skipped = (entry.get(name) for name in ("tests_total", "tests_passed", "tests_skipped"))
    skipped = 0 if skipped is None else skipped
    if not (all(isinstance(n, int) and not isinstance(n, bool) for n in (total, passed, skipped))
            and 0 < passed and passed + skipped == total
            and entry.get("tests_failed") == 0 and entry.get("test_files")):
        return "its counts are not those of a run that passed every test"
    return None


def exercise_status(course_root: Path, data: dict, exercise) -> Status:
    """done / failed / todo / partial / changed (passed, edited since) / not counted / not run."""
    entry = data["exercises"].get(exercise.key)
    if entry is None:
        return Status.NOT_RUN
    if why_not_from_a_run(data, exercise.key) is not None:
        return Status.NOT_COUNTED
    if entry["status"] == Status.DONE:
        current = file_digest(Path(course_root) / exercise.module_path)
        if current != entry.get("module_sha256") or changed_files(course_root, entry.get("unit")):
            return Status.CHANGED
    return Status(entry["status"])


def changed_files(course_root: Path, unit) -> list[str]:
    """The files of a unit ({path relative to the course: sha256}) that differ now, or are gone."""
    if not isinstance(unit, dict):
        return []
    root = Path(course_root)
    return [path for path, digest in unit.items()
            if not _inside_course(root, path) or file_digest(root / path) != digest]


def learners_files(course_root: Path, folder: str) -> set[str]:
    """The files under `folder` (relative to the course, as are the paths given back) that a
    learner's code may run: caches, hidden files, editors' backups and test files aside."""
    root, found = Path(course_root), set()
    if not _inside_course(root, folder):
        return found
    for inside, directories, files in os.walk(root / folder):
        directories[:] = [d for d in directories if d != "__pycache__" and not d.startswith(".")]
        found.update((Path(inside) / name).relative_to(root).as_posix() for name in files
                     if not name.startswith(("test_", ".")) and not name.endswith("~"))
    return found


def added_files(course_root: Path, checked: dict) -> list[str]:
    """The files a confirmation's folder holds now that it neither counted nor left out: added since."""
    folder, left_out = checked.get("folder"), checked.get("left_out")
    if not isinstance(folder, str) or not isinstance(left_out, list):
        return []
    unit = checked.get("unit") if isinstance(checked.get("unit"), dict) else {}
    return sorted(learners_files(course_root, folder) - set(unit) - set(left_out))


def _inside_course(root: Path, path) -> bool:
    return isinstance(path, str) and not Path(path).is_absolute() and ".." not in Path(path).parts


def _helpers(unit, module_path: str) -> dict:
    """A unit without the graded module itself (whose bytes every entry also holds as module_sha256)."""
    return {path: digest for path, digest in unit.items() if path != module_path} if isinstance(unit, dict) else {}


def unit_within(unit, confirmed) -> bool:
    """Whether every file of `unit` is in the `confirmed` unit with the same bytes."""
    return isinstance(unit, dict) and isinstance(confirmed, dict) and all(
        confirmed.get(path) == digest for path, digest in unit.items())


def record_confirmations(course_root: Path, verdicts: dict[str, dict], modules: dict[str, str], how: str,
                         units: dict[str, dict] | None = None, folders: dict[str, str] | None = None) -> dict:
    """Keep the trusted check's verdicts ({exercise key: {"verdict", "cases", "reason"}}) for the
    module bytes each was given (modules: exercise key -> sha256; a key without one is not kept)
    and the unit it ran (units: exercise key -> {file relative to the course: sha256}); folders:
    exercise key -> the folder whose learner's files it counted (its files not in the unit are kept
    as left out: a file added there later voids the confirmation).
    how: what ran the check, in words ("tpucourse confirm")."""
    units, folders = units or {}, folders or {}

    def change(data):
        confirmed = data.setdefault("confirmed", {})
        for key, verdict in verdicts.items():
            if key not in modules:
                continue
            entry = {"verdict": str(verdict.get("verdict")), "cases": int(verdict.get("cases") or 0),
                     "reason": str(verdict.get("reason") or "")[:600], "module_sha256": modules[key],
                     "unit": dict(sorted(units.get(key, {}).items())), "by": how, "date": now()}
            if key in folders:
                entry["folder"] = folders[key]
                entry["left_out"] = sorted(learners_files(course_root, folders[key]) - set(entry["unit"]))
            _carry_solution_read(confirmed.get(key), entry)
            entry["seal"] = seal(key, entry)
            confirmed[key] = entry

    return update(course_root, change)


def confirmation(course_root: Path, data: dict, exercise) -> tuple[Confirmation, str]:
    """(how far a done exercise's done is confirmed, the trusted check's reason where it disagrees):
    CONFIRMED where the trusted check agreed on the very bytes it is done with (its module and every
    file of its unit, as they are now), DISAGREES where it disagreed with them, else OWN_RUN (never
    checked, or checked on other bytes)."""
    entry = data["exercises"].get(exercise.key) or {}
    checked = _sealed_confirmation(data, exercise.key)
    if (checked is None or checked.get("module_sha256") != entry.get("module_sha256")
            or not unit_within(_helpers(entry.get("unit"), exercise.module_path), checked.get("unit") or {})
            or changed_files(course_root, checked.get("unit")) or added_files(course_root, checked)):
        return Confirmation.OWN_RUN, ""
    if checked.get("verdict") == "agrees":
        return Confirmation.CONFIRMED, ""
    if checked.get("verdict") == "disagrees":
        return Confirmation.DISAGREES, str(checked.get("reason", ""))
    return Confirmation.OWN_RUN, ""


def why_not_confirmed(data: dict, key: str, module_sha256: str | None, unit: dict | None = None,
                      course_root: Path | None = None) -> str | None:
    """Why the trusted check has not confirmed these bytes of exercise `key` (None: it agreed on
    exactly them): its module's, and every file of `unit` ({file relative to the course: sha256},
    what this run ran), with the confirmed unit's files unchanged in `course_root`. A gate on the
    chip times a learner's kernel only once it is confirmed."""
    checked = _sealed_confirmation(data, key)
    if checked is None:
        return "the trusted check has not confirmed it"
    if module_sha256 is None or checked.get("module_sha256") != module_sha256:
        return "the trusted check confirmed other bytes of it (it was edited since)"
    confirmed_unit = checked.get("unit") if isinstance(checked.get("unit"), dict) else {}
    changed = [path for path, digest in (unit or {}).items() if confirmed_unit.get(path) != digest]
    if course_root is not None:
        changed += changed_files(course_root, checked.get("unit")) + added_files(course_root, checked)
    if changed:
        return (f"the trusted check confirmed other bytes of the files it runs ({', '.join(sorted(set(changed))[:3])} "
                f"changed or added since)")
    if checked.get("verdict") != "agrees":
        return f"the trusted check disagrees: {checked.get('reason') or 'no reason kept'}"
    return None


def _sealed_confirmation(data: dict, key: str) -> dict | None:
    """The trusted check's kept verdict on exercise `key`, where its seal holds; None otherwise."""
    checked = data.get("confirmed", {}).get(key)
    return checked if isinstance(checked, dict) and checked.get("seal") == seal(key, checked) else None


def record_solution_read(course_root: Path, key: str, before_done: bool) -> dict:
    """Keep that exercise `key`'s shipped solution was shown (its first showing), sealed as every entry
    is; the exercise's done entry and confirmation carry the mark's seal (and later ones carry it
    over), so that a mark removed or altered by hand reads "tampered" (`solution_read`)."""
    def change(data):
        reads = data.setdefault("solutions_read", {})
        if not isinstance(reads.get(key), dict):
            mark = {"date": now(), "before_done": bool(before_done)}
            mark["seal"] = seal(key, mark)
            reads[key] = mark
        tag = reads[key].get("seal")
        for table in ("exercises", "confirmed"):
            entry = data.get(table, {}).get(key)
            if isinstance(entry, dict) and entry.get("seal") == seal(key, entry) and "solution_read" not in entry:
                entry["solution_read"] = tag
                entry["seal"] = seal(key, entry)

    return update(course_root, change)


SOLUTION_NOT_READ, SOLUTION_READ_AFTER, SOLUTION_READ_BEFORE, SOLUTION_READ_TAMPERED = (
    "not read", "read after it was confirmed done", "read before it was confirmed done", "tampered")


def solution_read(data: dict, key: str) -> str:
    """Whether exercise `key`'s solution was shown, and when: one of the SOLUTION_* words; "tampered"
    where the mark is missing while its entries carry its seal, or does not match its seal."""
    mark = data.get("solutions_read", {}).get(key) if isinstance(data.get("solutions_read"), dict) else None
    carried = [entry.get("solution_read") for table in ("exercises", "confirmed")
               for entry in [data.get(table, {}).get(key)] if isinstance(entry, dict) and "solution_read" in entry]
    if mark is None:
        return SOLUTION_READ_TAMPERED if carried else SOLUTION_NOT_READ
    if (not isinstance(mark, dict) or mark.get("seal") != seal(key, mark)
            or any(tag != mark.get("seal") for tag in carried)):
        return SOLUTION_READ_TAMPERED
    return SOLUTION_READ_BEFORE if mark.get("before_done") else SOLUTION_READ_AFTER


def _carry_solution_read(previous, written: dict) -> None:
    """An entry written anew keeps the seal of its exercise's solution-read mark."""
    if isinstance(previous, dict) and "solution_read" in previous:
        written["solution_read"] = previous["solution_read"]


def hints_shown(data: dict, key: str) -> int:
    return int(data["hints"].get(key, 0))
