"""One sandbox per graded tree: what a tree's processes see, and that none outlives its run.

Every process of a tree (its pytest run, the value check's worker) runs through
`TreeSandbox.run` in a sandbox of bubblewrap (`bwrap`, from the distribution):

- its own PID, network (loopback only), IPC and UTS namespaces: it sees and signals no process
  of the grader's or of another tree, reaches no network, and when its command ends the
  kernel ends every process it started, detached ones included, before `run` returns;
- a file system of its own: the system (/usr, /etc, /sys) and Python read-only; of the course,
  only what a graded run reads (COURSE_SHOWN: not solutions/, tests/ nor .git), and the folders
  the running package imports from, however it was installed (an editable install of another
  checkout: its pytest_tpucourse/ alone, never that checkout's solutions/); a private
  copy of the tree at the tree's own path, and a private folder (its working directory, home,
  TMPDIR, a copy of the compile cache, the files it hands back), both writable; /tmp and
  /dev/shm empty. Other trees, the grader's outputs and keys are not there at all;
- run by root, each tree runs as a throwaway user of its own (a uid no account has), so even
  a process that left the namespaces would own nothing of the machine's and could start at
  most NPROC processes; run by anyone else, bubblewrap maps the user into a user namespace.

What the grader reads back is only what `run` returns, after every process is gone: the exit
status, the first and last lines of stdout and stderr (bounded_log.py), and the files it asked
for, read without following links, each at most HAND_BACK_BYTES.

`Isolation.none()` (`tpucourse grade --no-sandbox`) runs the same commands without any of
this, in a process group of their own on the tree itself: for trees the instructor trusts.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .bounded_log import BoundedLog, KeptLog, drain

COURSE_SHOWN = ("course.toml", "pyproject.toml", "conftest.py", "pytest_tpucourse", "exercises")
SYSTEM_SHOWN = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
THROWAWAY_UIDS = (1_600_000_000, 1_700_000_000)  # no account has one; one drawn per tree
NPROC = 4096  # processes and threads of one throwaway user (JAX starts a pool per core)
FILE_BYTES = 1 << 30  # the largest file a sandboxed process may write
TMP_BYTES = 1 << 30  # /tmp and /dev/shm, each
TREE_BYTES = 256 << 20  # a tree larger than this is not copied (not graded)
TREE_FILES = 20_000
HAND_BACK_BYTES = 64 << 20
NAMESPACE_END_SECONDS = 20.0  # from the command's end to the last process of its namespace gone
POLL_SECONDS = 0.1
NOT_COPIED = ("__pycache__",)  # compiled bytecode may differ from the source it claims to be
ENVIRONMENT_KEPT = ("PATH", "PYTHONPATH", "LANG", "LANGUAGE", "TZ", "TERM")  # PYTHONPATH's folders: shown
ENVIRONMENT_PREFIXES = ("LC_", "JAX_", "XLA_", "TPU_", "LIBTPU_", "TF_CPP_")


class SandboxUnavailable(RuntimeError):
    """No sandbox can be made on this machine; the message says why and what to do."""


@dataclass(frozen=True)
class Isolation:
    """How each tree is kept apart: "bubblewrap" (a throwaway user per tree when root) or "none"."""

    kind: str
    tool: str | None = None
    throwaway_user: bool = False

    @classmethod
    def none(cls) -> Isolation:
        return cls("none")

    @property
    def isolated(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        if not self.isolated:
            return "none (--no-sandbox): every tree's processes run as the grader's user, unconfined"
        user = "a throwaway user per tree" if self.throwaway_user else "the grader's user in a user namespace"
        return f"bubblewrap: namespaces per tree (PID, network, IPC, mounts), {user}"


def find_isolation(*, unsandboxed: bool = False) -> Isolation:
    """The sandbox this machine can give, checked by starting one; SandboxUnavailable if none
    (unsandboxed: none asked for)."""
    if unsandboxed:
        return Isolation.none()
    tool = shutil.which("bwrap")
    fix = ("; grade only trees you trust without one: --no-sandbox")
    if tool is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: install it from your distribution "
                                 f"(apt install bubblewrap, dnf install bubblewrap){fix}")
    isolation = Isolation("bubblewrap", tool, throwaway_user=os.geteuid() == 0)
    probe = subprocess.run([tool, *_namespaces(isolation), "--ro-bind", "/", "/", "--proc", "/proc",
                            "--dev", "/dev", "true"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        raise SandboxUnavailable(f"bubblewrap cannot make a sandbox here: {probe.stderr.strip()} (user "
                                 f"namespaces may be turned off: sysctl kernel.unprivileged_userns_clone, "
                                 f"or kernel.apparmor_restrict_unprivileged_userns on Ubuntu){fix}")
    return isolation


def _namespaces(isolation: Isolation) -> list[str]:
    spaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--new-session"]
    return spaces if isolation.throwaway_user else ["--unshare-user", *spaces]


@dataclass(frozen=True)
class CourseView:
    """What of the machine every sandbox sees read-only, and what it must not see at all.

    shown: the system's folders, Python's, the course's COURSE_SHOWN entries and the running
    package's own folder (package_folders); hidden: paths inside those that a sandbox must not
    see (every tree of the class, the grader's outputs), each covered by an empty folder or file.
    """

    course_root: Path
    shown: tuple[Path, ...]
    hidden: tuple[Path, ...] = ()

    @classmethod
    def of(cls, course_root: Path, hidden=()) -> CourseView:
        course_root = Path(course_root).resolve()
        hidden = tuple(sorted({Path(p).resolve() for p in hidden}))
        course = [course_root / name for name in COURSE_SHOWN if (course_root / name).exists()]
        installs, entries = _python_paths()
        # A hidden path inside Python's folders (a --key file in the environment) is covered where it
        # is (covered()); a folder of Python's inside a hidden one (a tree on sys.path) is not shown.
        python = [p for p in [*installs, *(e for e in entries if not _inside(e, course_root) and not _a_course(e))]
                  if not _inside(course_root, p) and not any(_inside(p, h) for h in hidden)]
        system = [Path(p) for p in SYSTEM_SHOWN if os.path.lexists(p)]
        return cls(course_root, tuple(_outermost([*system, *python, *course, *package_folders()])), hidden)

    def covered(self) -> list[Path]:
        """The hidden paths that lie inside a shown one (the others are not there anyway), as they are
        now: one made later (the gradebook, after every sandbox) is made where no sandbox looks."""
        return [h for h in self.hidden if os.path.lexists(h) and any(_inside(h, s) for s in self.shown)]


def package_folders() -> list[Path]:
    """The folders the running package is imported from, as given and resolved: what every sandboxed
    `python -m pytest` and trusted worker imports too, whether it lies in site-packages, in this
    course's checkout, or in another checkout an editable install's finder points at (no sys.path
    entry names it)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this module is classroom/sandbox.py
    return sorted({Path(package), Path(os.path.realpath(package))})


def _a_course(folder: Path) -> bool:
    """A course checkout on sys.path (an older editable install's entry): shown whole, it would show
    its solutions/ and tests/; its package is shown by package_folders instead."""
    return (folder / "course.toml").is_file()


def _python_paths() -> tuple[list[Path], list[Path]]:
    """Python's installation and the environment's packages; the other folders sys.path names
    (of which a sandbox sees none inside the course: tests/ is on it in the course's own runs)."""
    installs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(sys.executable),
                *(sysconfig.get_paths().get(k, "") for k in ("purelib", "platlib", "stdlib", "platstdlib"))}
    entries = {p for p in sys.path if p and os.path.isabs(p)}

    def existing(names) -> list[Path]:
        paths = set()
        for name in names:
            if name and os.path.exists(name):
                paths.add(Path(os.path.abspath(name)))
                paths.add(Path(os.path.realpath(name)))
        return sorted(p for p in paths if p != Path("/"))

    return existing(installs), existing(entries - installs)


def _outermost(paths: list[Path]) -> list[Path]:
    """The paths, those inside another left out, in a stable order."""
    unique = sorted(set(paths), key=lambda p: (len(p.parts), str(p)))
    kept: list[Path] = []
    for path in unique:
        if not any(_inside(path, k) for k in kept):
            kept.append(path)
    return kept


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass(frozen=True)
class SandboxedRun:
    """How one command ended in a sandbox, read after every process of it was gone."""

    exit_status: int | None  # None: killed by the grader (`killed` says why)
    stdout_log: KeptLog
    stderr_log: KeptLog
    files: dict[str, bytes]  # the files asked for that it left, as regular files, within the limits
    seconds: float
    killed: str = ""  # why the grader killed it ("" when it ended by itself)
    missing: dict[str, str] = field(default_factory=dict)  # a file asked for and not handed back: why

    @property
    def timed_out(self) -> bool:
        return bool(self.killed)

    @property
    def stdout(self) -> bytes:
        return "\n".join(self.stdout_log.lines()).encode()

    @property
    def stderr(self) -> bytes:
        return "\n".join(self.stderr_log.lines()).encode()


class TreeSandbox:
    """A tree's sandbox: a private copy of the tree and a private folder, in `folder` (removed by
    `close`). `run` runs one command in it; the copy and the folder last from one run to the next.

    refused: why the tree cannot be graded ("" when it can): a link out of the tree, too large.
    tree: the tree's path as its commands see it (its own path: messages name the learner's files).
    work: the private folder (the working directory and home of every run; the same path inside).
    cache: `shared_cache`'s path, where its commands find a private copy of it (no tree writes the
    shared one), or None.
    stop: set by another thread to kill the running command at once (the grading was interrupted).
    """

    def __init__(self, tree: Path, folder: Path, view: CourseView, isolation: Isolation, *,
                 shared_cache: Path | None = None, stop: threading.Event | None = None):
        self.isolation, self.view, self.stop = isolation, view, stop
        self.folder = Path(folder)
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.uid = (secrets.randbelow(THROWAWAY_UIDS[1] - THROWAWAY_UIDS[0]) + THROWAWAY_UIDS[0]
                    if isolation.throwaway_user else None)
        self.refused = ""
        source = Path(tree).resolve()
        self.tree_path, self.tree = source, str(source)
        self.work = self.folder / "work"
        self.work.mkdir(mode=0o700, exist_ok=True)
        (self.work / "tmp").mkdir(exist_ok=True)
        self.cache = Path(shared_cache).resolve() if shared_cache is not None else None
        self.cache_copy = self.folder / "cache" if self.cache is not None and isolation.isolated else None
        if not isolation.isolated:
            return
        self._copy = self.folder / "tree"
        self.refused = _refusal(source, view) or copy_tree(source, self._copy)
        if self.uid is not None:
            _chown_tree(self.folder, self.uid)
        if self.cache_copy is not None:
            _copy_cache(self.cache, self.cache_copy, self.uid)

    def __enter__(self) -> TreeSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a sandboxed command: a few of the grader's (locale, PYTHONPATH, JAX's and
        XLA's settings; never its secrets), its own home and TMPDIR, and `extra`."""
        env = {k: v for k, v in os.environ.items()
               if k in ENVIRONMENT_KEPT or k.startswith(ENVIRONMENT_PREFIXES)}
        env.update({"HOME": str(self.work), "TMPDIR": str(self.work / "tmp"), "PY_COLORS": "0",
                    "PYTHONUNBUFFERED": "1",  # what it printed before a crash is kept
                    "USER": "learner", "LOGNAME": "learner"})
        env.setdefault("PATH", "/usr/bin:/bin")
        env.update(extra or {})
        return env

    def run(self, command: list[str], *, timeout: float, inputs: dict[str, bytes] | None = None,
            hand_back=(), env: dict[str, str] | None = None, secrets_by_fd: dict[str, bytes] | None = None,
            ended_when: str | None = None, exit_grace: float = 30.0) -> SandboxedRun:
        """Run `command` in the sandbox, in `work`, and return how it ended once every process it
        started is gone.

        timeout: wall seconds before every process of it is killed. inputs: files written into
        `work` first. hand_back: names of files in `work` to read back. env: extra environment.
        secrets_by_fd: {ENV: bytes}: each on a pipe only this command inherits, its descriptor
        number in ENV. ended_when: a file of `work` whose appearance means the run is over: from
        then its processes have `exit_grace` seconds to end.
        """
        if self.refused:
            raise RuntimeError(f"the tree cannot be run: {self.refused}")
        for name in {*hand_back, *([ended_when] if ended_when else []), *(inputs or {})}:
            _remove(self.work, _simple_name(name))  # what an earlier run left there is not this run's
        for name, data in (inputs or {}).items():
            _write_new(self.work, name, data, self.uid)
        full_env = self.environment(env)
        pipes, keep = [], []
        for variable, secret in (secrets_by_fd or {}).items():
            read, write = os.pipe()
            os.write(write, secret)
            os.close(write)
            pipes.append(read)
            full_env[variable] = str(read)
        info_read = info_write = None
        if self.isolation.isolated:
            info_read, info_write = os.pipe()
            argv = self._bwrap(command, info_write)
            keep = [*pipes, info_write]
        else:
            argv, keep = list(command), pipes
        start = time.monotonic()
        try:
            process = subprocess.Popen(argv, cwd=self.work, env=full_env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True, pass_fds=keep)
        finally:
            for fd in keep:
                os.close(fd)
        logs = (BoundedLog(), BoundedLog())
        readers = [threading.Thread(target=drain, args=(stream, log), daemon=True)
                   for stream, log in zip((process.stdout, process.stderr), logs)]
        for reader in readers:
            reader.start()
        sandbox_pid = _read_child_pid(info_read, process) if info_read is not None else None
        namespace = _pid_namespace(sandbox_pid)
        killed = self._watch(process, start, timeout, ended_when, exit_grace)
        _kill_group(process)
        process.wait()
        if sandbox_pid is not None:
            _wait_for_namespace_end(sandbox_pid, namespace)
        for reader in readers:
            reader.join(timeout=10)
        for stream in (process.stdout, process.stderr):
            stream.close()
        files, missing = self._hand_back(hand_back)
        seconds = round(time.monotonic() - start, 2)
        return SandboxedRun(None if killed else process.returncode, logs[0].kept(), logs[1].kept(),
                            files, seconds, killed, missing)

    def _watch(self, process, start, limit, ended_when, exit_grace) -> str:
        """Wait for the command's end; why it had to be killed ("" when it ended by itself)."""
        ended_at = None
        marker = self.work / ended_when if ended_when else None
        while process.poll() is None:
            now = time.monotonic()
            if marker is not None and ended_at is None and os.path.lexists(marker):
                ended_at = now
            if self.stop is not None and self.stop.is_set():
                return "grading interrupted"
            if now - start > limit:
                return f"ran past its limit of {limit:g} s: killed"
            if ended_at is not None and now - ended_at > exit_grace:
                return (f"its run ended, but the process did not exit within {exit_grace:g} s "
                        f"(a thread or child process that never ends?): killed")
            time.sleep(POLL_SECONDS)
        return ""

    def _hand_back(self, names) -> tuple[dict[str, bytes], dict[str, str]]:
        files, missing = {}, {}
        work_copy = self.work
        directory = os.open(work_copy, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in names:
                try:
                    files[name] = _read_regular(directory, _simple_name(name), HAND_BACK_BYTES)
                except FileNotFoundError:
                    missing[name] = "not there"
                except (OSError, ValueError) as error:
                    missing[name] = str(error)
        finally:
            os.close(directory)
        return files, missing

    def _bwrap(self, command: list[str], info_fd: int) -> list[str]:
        mounts = _Mounts()
        mounts.args += ["--proc", "/proc", "--dev", "/dev"]
        mounts.made |= {Path("/proc"), Path("/dev")}
        mounts.tmpfs(Path("/dev/shm"), TMP_BYTES)
        mounts.tmpfs(Path("/tmp"), TMP_BYTES)
        for path in self.view.shown:
            if path.is_symlink() and str(path) in SYSTEM_SHOWN:
                mounts.symlink(os.readlink(path), path)
            else:
                mounts.ro_bind(path, path)
        for path in self.view.covered():
            mounts.cover(path)
        mounts.bind(self.work, self.work)
        mounts.bind(self._copy, self.tree_path)
        if self.cache_copy is not None:
            mounts.bind(self.cache_copy, self.cache)
        argv = [self.isolation.tool, *_namespaces(self.isolation), "--hostname", "sandbox",
                "--info-fd", str(info_fd), *mounts.args, "--chdir", str(self.work)]
        limits = [f"--fsize={FILE_BYTES}", "--core=0"]
        if self.uid is not None:
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP", "--",
                     "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
            limits.append(f"--nproc={NPROC}")
        else:
            argv.append("--")
        if shutil.which("prlimit"):
            argv += ["prlimit", *limits]
        return [*argv, "--", *command]


class _Mounts:
    """bubblewrap's mount arguments, with every folder on the way to a mount made readable."""

    def __init__(self):
        self.args: list[str] = []
        self.from_host: list[Path] = []  # what is there below these is the host's
        self.made: set[Path] = {Path("/")}

    def _parents(self, path: Path) -> None:
        for parent in reversed(path.parents):
            if parent in self.made or any(_inside(parent, h) for h in self.from_host):
                continue
            self.args += ["--perms", "0755", "--dir", str(parent)]
            self.made.add(parent)

    def ro_bind(self, source: Path, target: Path) -> None:
        self._parents(target)
        self.args += ["--ro-bind", str(source), str(target)]
        self.from_host.append(target)

    def bind(self, source: Path, target: Path) -> None:
        self._parents(target)
        self.args += ["--bind", str(source), str(target)]
        self.from_host.append(target)

    def symlink(self, to: str, target: Path) -> None:
        self._parents(target)
        self.args += ["--symlink", to, str(target)]
        self.made.add(target)

    def tmpfs(self, target: Path, size: int) -> None:
        self._parents(target)
        self.args += ["--perms", "1777", "--size", str(size), "--tmpfs", str(target)]
        self.from_host = [h for h in self.from_host if not _inside(h, target)]
        self.made = {m for m in self.made if not _inside(m, target) or m == target} | {target}

    def cover(self, path: Path) -> None:
        """An empty, read-only folder or file where `path` is."""
        if path.is_dir() and not path.is_symlink():
            self.args += ["--perms", "0755", "--size", "4096", "--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            self.args += ["--ro-bind", "/dev/null", str(path)]


def _refusal(source: Path, view: CourseView) -> str:
    if not source.is_dir():
        return f"{source} is not a folder"
    if _inside(view.course_root, source):
        return "the tree holds the course itself"
    for shown in view.shown:
        if _inside(source, shown) and shown.is_relative_to(view.course_root):
            return (f"the tree is inside the course's {shown.relative_to(view.course_root)}/, which every "
                    f"sandbox sees: grade a copy of it from elsewhere")
    return ""


def copy_tree(source: Path, target: Path) -> str:
    """Copy the tree's folders and regular files to `target` (a link only when it stays inside the
    tree; never __pycache__); why it cannot be graded, or ""."""
    root = Path(os.path.realpath(source))
    target.mkdir(mode=0o700, exist_ok=True)
    count = size = 0
    pending = [(source, target)]
    while pending:
        here, there = pending.pop()
        with os.scandir(here) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                shown = Path(entry.path).relative_to(source)
                count += 1
                if count > TREE_FILES:
                    return f"the tree holds more than {TREE_FILES} files: not copied, not graded"
                if entry.is_symlink():
                    link = os.readlink(entry.path)
                    resolved = Path(os.path.realpath(entry.path))
                    if not _inside(resolved, root) or os.path.isabs(link):
                        return (f"{shown} is a link to {link}, outside the tree: a tree's files must be its "
                                f"own (copy them in)")
                    os.symlink(link, there / entry.name)
                elif entry.is_dir(follow_symlinks=False):
                    if entry.name in NOT_COPIED:
                        continue
                    (there / entry.name).mkdir(mode=0o700)
                    pending.append((Path(entry.path), there / entry.name))
                elif entry.is_file(follow_symlinks=False):
                    if entry.name.endswith((".pyc", ".pyo")):
                        continue
                    size += entry.stat(follow_symlinks=False).st_size
                    if size > TREE_BYTES:
                        return f"the tree holds more than {TREE_BYTES >> 20} MB: not copied, not graded"
                    shutil.copyfile(entry.path, there / entry.name, follow_symlinks=False)
    return ""


def _copy_cache(shared: Path, copy: Path, uid: int | None) -> None:
    """The shared compile cache's entries in `copy`, a folder of the sandbox's own. For a throwaway
    user, hard links to the entries, which it cannot write (they are not its own) but can replace
    in its folders; else copies, which it may change at will."""
    copy.mkdir(mode=0o700)
    if uid is not None:
        os.chown(copy, uid, uid)
    if not shared.is_dir():
        return
    for here, folders, files in os.walk(shared):
        there = copy / Path(here).relative_to(shared)
        for name in folders:
            (there / name).mkdir(mode=0o700)
            if uid is not None:
                os.chown(there / name, uid, uid)
        for name in files:
            source = Path(here) / name
            if source.is_symlink() or not source.is_file():
                continue
            try:
                if uid is None or source.stat().st_uid == uid:
                    raise OSError("a copy, not a link")
                os.link(source, there / name)
            except OSError:
                shutil.copyfile(source, there / name)
                if uid is not None:
                    os.chown(there / name, uid, uid)


def _chown_tree(folder: Path, uid: int, gid: int | None = None) -> None:
    gid = uid if gid is None else gid
    os.chown(folder, uid, gid, follow_symlinks=False)
    for here, folders, files in os.walk(folder):
        for name in [*folders, *files]:
            os.chown(os.path.join(here, name), uid, gid, follow_symlinks=False)


def _simple_name(name: str) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"{name!r}: a file of the sandbox's folder is named without a folder")
    return name


def _remove(folder: Path, name: str) -> None:
    """Remove `name` from `folder` whatever it is (never following a link)."""
    path = folder / name
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _write_new(folder: Path, name: str, data: bytes, uid: int | None) -> None:
    """A new file `name` in `folder` (which a sandbox writes in: never through a link it left)."""
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        if uid is not None:
            os.fchown(handle.fileno(), uid, uid)


def _read_regular(directory: int, name: str, limit: int) -> bytes:
    """A regular file of `directory`, never through a link, at most `limit` bytes."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{info.st_size} bytes, more than {limit}")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(limit + 1)[:limit]
    finally:
        os.close(fd)


def _read_child_pid(info_read: int, process: subprocess.Popen) -> int | None:
    """The sandbox's first process, from bubblewrap's --info-fd (None if it never started)."""
    data = b""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([info_read], [], [], 0.2)
            if ready:
                chunk = os.read(info_read, 4096)
                if not chunk:
                    break
                data += chunk
                if b"}" in data:
                    break
            elif process.poll() is not None:
                break
    finally:
        os.close(info_read)
    try:
        return int(json.loads(data.decode())["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _pid_namespace(pid: int | None) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino if pid else None
    except OSError:
        return None


def _wait_for_namespace_end(pid: int, namespace: int | None) -> None:
    """Until the sandbox's first process is gone: the kernel ends every other process of its PID
    namespace before it (and bubblewrap's --die-with-parent ends it when bubblewrap is killed)."""
    deadline = time.monotonic() + NAMESPACE_END_SECONDS
    while time.monotonic() < deadline:
        try:
            if namespace is not None and os.stat(f"/proc/{pid}/ns/pid").st_ino != namespace:
                return  # the number is another process's now
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            return
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"the sandbox's process {pid} did not end within {NAMESPACE_END_SECONDS:g} s")


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
