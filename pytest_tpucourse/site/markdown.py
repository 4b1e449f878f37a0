"""The chapters' README.md as HTML: the small part of Markdown the course writes in.

Headings, paragraphs, fenced code (highlighted by Pygments, which pytest installs), tables,
`-` and `1.` lists whose items may hold paragraphs and code, block quotes, `inline code`,
**bold**, *italic* and [links](url). Underscores never emphasise: the READMEs are full of
identifiers like block_q. Everything else is text, HTML-escaped.
"""

from __future__ import annotations

import html
import re

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_LEXER_ALIASES = {"": "text", "mlir": "text", "console": "text"}


def slug(text: str) -> str:
    """A heading's anchor: lower case, words joined by hyphens."""
    return re.sub(r"[^\w]+", "-", re.sub(r"<[^>]+>", "", text).lower()).strip("-") or "section"


def highlight(code: str, language: str) -> str:
    """A code block as Pygments' HTML (classes from the site's stylesheet), plain when no lexer fits."""
    from pygments import highlight as pygmentize
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    name = _LEXER_ALIASES.get(language, language)
    try:
        lexer = get_lexer_by_name(name)
    except ClassNotFound:
        lexer = get_lexer_by_name("text")
    body = pygmentize(code, lexer, HtmlFormatter(nowrap=True))
    return f'<pre class="code" data-lang="{html.escape(language or "text")}"><code>{body}</code></pre>'


def inline(text: str) -> str:
    """Inline Markdown: code spans first (nothing inside them is Markdown), then links and emphasis."""
    out = []
    for index, part in enumerate(re.split(r"(`+[^`]*?`+)", text)):
        if index % 2:
            out.append(f"<code>{html.escape(part.strip('`'))}</code>")
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)",
                      lambda m: f'<a href="{html.escape(m.group(2))}">{m.group(1)}</a>', part)
        part = re.sub(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])", r"<em>\1</em>", part)
        out.append(part)
    return "".join(out)


def render(text: str) -> str:
    """Markdown text -> an HTML fragment."""
    return "\n".join(_blocks(text.replace("\t", "    ").splitlines()))


def _blocks(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            i = _code(lines, i, fence, out)
            continue
        heading = _HEADING.match(line)
        if heading:
            level, title = len(heading.group(1)), inline(heading.group(2))
            out.append(f'<h{level} id="{slug(title)}">{title}</h{level}>')
            i += 1
            continue
        if line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            i = _table(lines, i, out)
            continue
        if _ITEM.match(line):
            i = _list(lines, i, out)
            continue
        if line.lstrip().startswith(">"):
            quoted = []
            while i < len(lines) and lines[i].lstrip().startswith(">"):
                quoted.append(lines[i].lstrip()[1:].removeprefix(" "))
                i += 1
            out.append("<blockquote>" + "\n".join(_blocks(quoted)) + "</blockquote>")
            continue
        paragraph = []
        while i < len(lines) and lines[i].strip() and not _starts_block(lines, i):
            paragraph.append(lines[i].strip())
            i += 1
        out.append(f"<p>{inline(' '.join(paragraph))}</p>")
    return out


def _starts_block(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(_FENCE.match(line) or _HEADING.match(line) or _ITEM.match(line)
                or line.lstrip().startswith(">")
                or (line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1])))


def _code(lines: list[str], i: int, fence, out: list[str]) -> int:
    indent, marker, language = len(fence.group(1)), fence.group(2), fence.group(3)
    body = []
    i += 1
    while i < len(lines) and not lines[i].strip().startswith(marker):
        body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i].lstrip())
        i += 1
    out.append(highlight("\n".join(body) + "\n", language.lower()))
    return i + 1


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)]


def _table(lines: list[str], i: int, out: list[str]) -> int:
    head = _cells(lines[i])
    rows = []
    i += 2
    while i < len(lines) and lines[i].lstrip().startswith("|"):
        rows.append(_cells(lines[i]))
        i += 1
    cells = "".join(f"<th>{inline(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in rows)
    out.append(f'<div class="table"><table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table></div>')
    return i


def _list(lines: list[str], i: int, out: list[str]) -> int:
    first = _ITEM.match(lines[i])
    indent, ordered = len(first.group(1)), first.group(2)[0].isdigit()
    items: list[list[str]] = []
    while i < len(lines):
        item = _ITEM.match(lines[i])
        if item and len(item.group(1)) == indent:
            items.append([item.group(3)])
            i += 1
            continue
        if not lines[i].strip():  # a blank line ends the list unless an indented line follows
            following = next((line for line in lines[i + 1:] if line.strip()), "")
            if following and len(following) - len(following.lstrip()) > indent and not _ITEM.match(following):
                items[-1].append("")
                i += 1
                continue
            break
        if len(lines[i]) - len(lines[i].lstrip()) > indent:
            items[-1].append(lines[i])
            i += 1
            continue
        break
    tag = "ol" if ordered else "ul"
    rendered = []
    for item in items:
        body = [item[0]] + _dedent(item[1:])
        inner = _blocks(body)
        if len(inner) == 1 and inner[0].startswith("<p>"):
            inner = [inner[0][3:-4]]  # a one-paragraph item stays tight
        rendered.append("<li>" + "\n".join(inner) + "</li>")
    out.append(f"<{tag}>" + "".join(rendered) + f"</{tag}>")
    return i


def _dedent(lines: list[str]) -> list[str]:
    widths = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(widths, default=0)
    return [line[cut:] for line in lines]
