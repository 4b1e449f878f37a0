"""A file's code as the similarity report compares it: what a copy cannot change by hiding.

Names, strings and numbers become placeholders and layout goes (normalised_tokens). Before
that, where the file parses as Python, its syntax tree is normalised so that the cheap disguises
of a copy change nothing:
  - statements that do nothing are dropped: `pass`, a lone constant or name (a docstring), and an
    assignment of a constant to a name the file never reads (`_pad = None` after every line);
  - each block's statements are put in one canonical order wherever their order does not matter:
    two statements depend on each other where one assigns a name the other reads or assigns, and
    among the orders that keep every such pair, the one whose statements' normalised tokens come
    first is taken (the least topological order, the same for every reordering of the original).
A file that does not parse (a syntax error, a text file) is compared by its tokens as they are.
"""

from __future__ import annotations

import ast
import hashlib
import heapq
import keyword
import token

from . import python_source

Tokens = list[str]
REORDERED_AT_MOST = 300  # statements of one block put in canonical order (the order costs their square)


def tokens(source: bytes) -> Tokens:
    """The file's normalised tokens (python_source.UnreadableSource where Python cannot read it)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return normalised_tokens(source)
    try:
        read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        _Normalise(read).visit(tree)
        return normalised_tokens(ast.unparse(tree).encode())
    except (RecursionError, ValueError, MemoryError):
        return normalised_tokens(source)


class _Normalise(ast.NodeTransformer):
    def __init__(self, read: set[str]):
        self.read = read

    def generic_visit(self, node):
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            statements = getattr(node, name, None)
            if isinstance(statements, list) and statements and all(isinstance(s, ast.stmt) for s in statements):
                kept = [s for s in statements if not self._no_op(s)] or [ast.Pass()]
                setattr(node, name, self._canonical(kept))
        return node

    def _no_op(self, statement: ast.stmt) -> bool:
        if isinstance(statement, ast.Pass):
            return True
        if isinstance(statement, ast.Expr) and isinstance(statement.value, (ast.Constant, ast.Name)):
            return True
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and isinstance(statement.value, ast.Constant):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            return all(isinstance(t, ast.Name) and t.id not in self.read for t in targets)
        return False

    def _canonical(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        """The least topological order of the block's statements by their normalised tokens."""
        if not 2 <= len(statements) <= REORDERED_AT_MOST:
            return statements
        uses = [_names(s) for s in statements]
        keys = ["\0".join(normalised_tokens(ast.unparse(s).encode())) for s in statements]
        after = [set() for _ in statements]  # i -> the statements that must stay after i
        waiting = [0] * len(statements)
        for j in range(len(statements)):
            for i in range(j):
                if _depend(uses[i], uses[j]):
                    after[i].add(j)
                    waiting[j] += 1
        ready = [(keys[i], i) for i in range(len(statements)) if waiting[i] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, i = heapq.heappop(ready)
            order.append(statements[i])
            for j in after[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, (keys[j], j))
        return order


def _names(statement: ast.stmt) -> tuple[set[str], set[str]]:
    """(names the statement reads, names it assigns), attributes and subscripts stored counting as
    their base name assigned; a statement that returns, raises or leaves a loop reads everything."""
    read, written = set(), set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name):
            (written if isinstance(node.ctx, (ast.Store, ast.Del)) else read).add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = node
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                written.add(base.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            written.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            written.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            written.update(node.names)
    if isinstance(statement, (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Assert)) or any(
            isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)) for node in ast.walk(statement)):
        read.add("\0every name")
    return read, written


def _depend(one: tuple[set[str], set[str]], other: tuple[set[str], set[str]]) -> bool:
    (read_a, wrote_a), (read_b, wrote_b) = one, other
    if "\0every name" in read_a or "\0every name" in read_b:
        return True
    return bool(wrote_a & (read_b | wrote_b) or wrote_b & read_a)


def code_digest(source: bytes) -> str:
    """The sha256 of the file's normalised tokens: the same for a copy renamed, reformatted or padded."""
    return hashlib.sha256("\0".join(tokens(source)).encode()).hexdigest()


def normalised_tokens(source: bytes) -> list[str]:
    """The file's tokens as compared: keywords and operators as written, every other name `N`,
    strings `S`, numbers `0`; comments, docstrings and layout left out. UnreadableSource where
    Python cannot read the file as source."""
    out: list[str] = []
    previous = token.NEWLINE
    for tok in python_source.tokens(source):  # what could be read is compared
        kind = tok.type
        if kind in (token.COMMENT, token.NL, token.NEWLINE, token.INDENT, token.DEDENT, token.ENCODING,
                    token.ENDMARKER):
            if kind in (token.NEWLINE, token.INDENT, token.DEDENT):
                previous = kind
            continue
        if kind == token.STRING and previous in (token.NEWLINE, token.INDENT, token.DEDENT):
            previous = kind
            continue  # a docstring, or a string standing alone
        previous = kind
        if kind == token.NAME:
            out.append(tok.string if keyword.iskeyword(tok.string) else "N")
        elif kind == token.STRING or kind == getattr(token, "FSTRING_START", -1):
            out.append("S")
        elif kind == token.NUMBER:
            out.append("0")
        else:
            out.append(tok.string)
    return out
