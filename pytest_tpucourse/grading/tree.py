"""Which tree is graded, and importing its modules by path.

A graded test asks for the `impl` fixture and calls `impl.<module>.<function>(...)`.
The same test file then grades the learner's `exercises/chNN/`, the shipped
`solutions/chNN/` (`--solutions`), or any tree laid out like `solutions/`
(`--impl-root DIR`). Modules are imported by file path under a package name
unique to the tree, so exercises/ch11/matmul.py and solutions/ch11/matmul.py never
collide, and a chapter's modules may import each other with `from . import x`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from ..core.course import EXERCISES, SOLUTIONS, Course, module_in_tree
from ..core.outcomes import LearnerCodeError
from .calls import PYTEST_OUTCOMES, LearnerFunction, pytest_outcome_message
from . import unit_files
from .context import GradingContext, active
from ..core.paths import shown
from .messages import describe_exception, exception_headline


@dataclass(frozen=True)
class GradedTree:
    """A directory holding chNN/ folders of implementations."""

    kind: str  # EXERCISES (the learner's work), SOLUTIONS, or "impl-root"
    root: Path

    def describe(self, course_root: Path) -> str:
        where = shown(self.root, course_root)
        return {
            EXERCISES: f"{where}/ (your work)",
            SOLUTIONS: f"{where}/ (the shipped reference solutions)",
            "impl-root": f"{where}/ (--impl-root)",
        }[self.kind]

    @property
    def is_learners(self) -> bool:
        """The learner's own exercises/: the only tree whose runs count as their progress."""
        return self.kind == EXERCISES

    def chapter_dir(self, chapter_id: str) -> Path:
        return self.root / chapter_id

    def module_path(self, chapter_id: str, module: str) -> Path:
        return Path(module_in_tree(self.root, chapter_id, module))

    @property
    def package_name(self) -> str:
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:10]
        return f"_tpucourse_graded_{self.kind.replace('-', '_')}_{digest}"


def graded_tree(course_root: Path, solutions: bool, impl_root: str | None) -> GradedTree:
    if impl_root is not None:
        return GradedTree("impl-root", Path(impl_root).resolve())
    if solutions:
        return GradedTree(SOLUTIONS, course_root / SOLUTIONS)
    return GradedTree(EXERCISES, course_root / EXERCISES)


class Implementation:
    """The modules of one chapter in the graded tree: `impl.matmul.matmul(x, y)`.

    Its functions are graded in `context` (the run's deadline, VMEM budget and caches).
    """

    def __init__(self, tree: GradedTree, course: Course, chapter_id: str,
                 context: GradingContext | None = None):
        self._tree = tree
        self._course = course
        self._chapter_id = chapter_id
        self._context = context

    @property
    def chapter_dir(self) -> Path:
        return self._tree.chapter_dir(self._chapter_id)

    def __getattr__(self, module_name: str) -> LearnerModule:
        if module_name.startswith("_"):
            raise AttributeError(module_name)
        return LearnerModule(self._tree, self._course, self._chapter_id, module_name, self._context)

    def __repr__(self) -> str:
        return f"<implementation of {self._chapter_id} from {self.chapter_dir}>"


class LearnerModule:
    """One module of the graded tree, imported on first use: `impl.matmul`."""

    def __init__(self, tree: GradedTree, course: Course, chapter_id: str, name: str,
                 context: GradingContext | None = None):
        self._tree = tree
        self._course = course
        self._chapter_id = chapter_id
        self._name = name
        self._context = context  # attributes are the module's functions: only _names here

    @property
    def path(self) -> Path:
        return self._tree.module_path(self._chapter_id, self._name)

    @property
    def course_root(self) -> Path:
        return self._course.root

    @property
    def tree_root(self) -> Path:
        return self._tree.root

    @property
    def chapter_id(self) -> str:
        return self._chapter_id

    @property
    def is_learners(self) -> bool:
        return self._tree.is_learners

    @property
    def imported_source(self) -> bytes | None:
        """The bytes this run imported the module from (None: not imported yet)."""
        return (self._context or active()).imported_sources.get(str(self.path.resolve()))

    def __getattr__(self, function_name: str) -> LearnerFunction:
        if function_name.startswith("_"):
            raise AttributeError(function_name)
        exercise = self._course.exercise(f"{self._chapter_id}.{self._name}")
        return LearnerFunction(self, function_name, exercise)

    def load(self) -> types.ModuleType:
        """Import the module by path; failures become a LearnerCodeError."""
        if not self.path.is_file():
            raise LearnerCodeError(
                f"{shown(self.path, self.course_root)} does not exist: the graded tree has no module "
                f"{self._name!r} for {self._chapter_id}."
            )
        package = _chapter_package(self._tree, self._chapter_id)
        qualified = f"{package}.{self._name}"
        fresh = qualified not in sys.modules
        context, resolved = self._context or active(), str(self.path.resolve())
        context.touched.add(resolved)
        if fresh:  # what is imported is what the run records (state, gate rows)
            source = self.path.read_bytes()
            context.imported[resolved] = hashlib.sha256(source).hexdigest()
            context.imported_sources[resolved] = source
        try:
            with unit_files.recording(self._tree.root) as seen:
                module = importlib.import_module(qualified)
            if fresh:
                self._keep_sources_imported(package)
                seen.files |= unit_files.referenced_files(module, self._tree.root)
                self.add_to_unit(seen.files)
            return module
        except PYTEST_OUTCOMES as error:  # pytest.skip() at import: a failure, never a skip
            sys.modules.pop(qualified, None)
            shown_as = shown(self.path, self.course_root)
            raise LearnerCodeError(pytest_outcome_message(f"importing {shown_as}", error, self.path,
                                                          self.course_root)) from None
        except Exception as error:  # the learner's module failed to import
            sys.modules.pop(qualified, None)
            raise LearnerCodeError(
                f"importing {shown(self.path, self.course_root)} failed:\n"
                + describe_exception(error, self.path, self.course_root),
                headline=exception_headline(f"importing {shown(self.path, self.course_root)}", error,
                                            self.path, self.course_root).replace(" raised ", " failed: ", 1),
            ) from None


    def add_to_unit(self, files) -> None:
        """Count these files of the tree as run by this module (unit_files.py), the module itself
        always, each hashed as this run imported it."""
        context, resolved = self._context or active(), str(self.path.resolve())
        files = {os.path.abspath(f) for f in files} | {os.path.abspath(self.path)}
        sources = {os.path.abspath(p): data for p, data in context.imported_sources.items()}
        sources[os.path.abspath(self.path)] = context.imported_sources.get(resolved)
        known = context.units.get(resolved, {})
        context.add_to_unit(resolved, unit_files.digests(files - set(known), {k: v for k, v in sources.items()
                                                                                if v is not None}))

    def _keep_sources_imported(self, package: str) -> None:
        """The bytes of the chapter's other modules this import brought in (`from . import helper`), read
        as soon as it returns: what solution_code.py tells their own code by, whatever the files hold
        later in the run."""
        context = self._context or active()
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if name.startswith(package + ".") and isinstance(file, str):
                resolved = str(Path(file).resolve())
                if resolved not in context.imported_sources:
                    try:
                        context.imported_sources[resolved] = Path(file).read_bytes()
                    except OSError:
                        pass


def import_file(path: Path) -> types.ModuleType:
    """The module at `path`, outside a graded run (`tpucourse compile`, a reproduction at the
    prompt): a file in a tree's chNN/ folder is imported as its chapter's package, as the
    graded tests import it, so `from . import other` works; any other file on its own."""
    path = Path(path).resolve()
    if re.fullmatch(r"ch\d\d", path.parent.name):
        package = _chapter_package(GradedTree("impl-root", path.parent.parent), path.parent.name)
        return importlib.import_module(f"{package}.{path.stem}")
    spec = importlib.util.spec_from_file_location(f"_tpucourse_file_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chapter_package(tree: GradedTree, chapter_id: str) -> str:
    """Register (once) a package whose __path__ is the tree's chapter folder."""
    root_name = tree.package_name
    if root_name not in sys.modules:
        root = types.ModuleType(root_name)
        root.__path__ = [str(tree.root)]
        sys.modules[root_name] = root
    name = f"{root_name}.{chapter_id}"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(tree.chapter_dir(chapter_id))]
        package.__package__ = name
        sys.modules[name] = package
    return name
