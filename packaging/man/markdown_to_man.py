#!/usr/bin/env python3
"""Writes a man page from one of basal's Markdown pages (basal-manifest(5) from docs/manifest.md).

The build runs it (cmake/reference.cmake), so the man page says what the page says and cannot
drift from it. It reads the Markdown that docs/ is written in, no more: ATX headings (# title,
## section, ### subsection), paragraphs, fenced code blocks, pipe tables, "- " and "1. " lists,
`code`, **bold**, [links](target) (the link's text is kept), and <!-- comments --> (dropped).
Tables become one tagged paragraph per row, which reads well at any terminal width. The output is
ASCII roff: other characters are written as \\[uXXXX].

Usage: markdown_to_man.py PAGE.md --name basal-manifest --section 5 --summary TEXT --version V [--out FILE]
"""

import argparse
import re
import sys

INLINE = re.compile(r"`([^`]*)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)]*)\)")


def escape(text):
    """Text as roff reads it, literally."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\e")
        elif ch == "-":
            out.append("\\-")  # typed as it reads: an ASCII '-' (options, names)
        elif ch == "'":
            out.append("\\(aq")
        elif ch == "`":
            out.append("\\(ga")
        elif ch == "\t":
            out.append(" ")
        elif ord(ch) > 0x7E or ord(ch) < 0x20:
            out.append("\\[u%04X]" % ord(ch) if ord(ch) > 0x7E else " ")
        else:
            out.append(ch)
    return "".join(out)


def inline(text):
    """Markdown inline markup to roff: code and bold in bold, links as their text."""
    out = []
    at = 0
    for m in INLINE.finditer(text):
        out.append(escape(text[at:m.start()]))
        if m.group(1) is not None:
            out.append("\\fB" + escape(m.group(1)) + "\\fR")
        elif m.group(2) is not None:
            out.append("\\fB" + inline(m.group(2)) + "\\fR")
        else:
            out.append(inline(m.group(3)))
        at = m.end()
    out.append(escape(text[at:]))
    return "".join(out)


def line(text):
    """One roff text line: a leading '.' would be a request."""
    return "\\&" + text if text.startswith(".") else text


def table_cells(row):
    """The cells of "| a | b \\| c |": split at unescaped pipes, then "\\|" is a pipe."""
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)]


def convert(markdown, name, section, summary, version):
    out = [
        f'.TH "{escape(name.upper())}" "{section}" "" "basal {escape(version)}" "basal manual"',
        ".ad l",
        ".nh",
        f".\\\" Generated from Markdown by packaging/man/markdown_to_man.py: do not edit.",
        ".SH NAME",
        f"{escape(name)} \\- {escape(summary)}",
        ".SH DESCRIPTION",
    ]
    lines = markdown.split("\n")
    i = 0
    paragraph = []
    seen_title = False

    def flush():
        if paragraph:
            out.append(".PP")
            out.append(line(inline(" ".join(p.strip() for p in paragraph))))
            paragraph.clear()

    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if stripped.startswith("<!--"):
            flush()
            while "-->" not in lines[i]:
                i += 1
            i += 1
            continue
        fence = re.match(r"^(\s*)(`{3,}|~{3,})", raw)
        if fence:
            flush()
            marker = fence.group(2)
            i += 1
            out += [".PP", ".RS 4", ".nf"]
            while i < len(lines) and not lines[i].strip().startswith(marker):
                out.append(line(escape(lines[i])))
                i += 1
            out += [".fi", ".RE"]
            i += 1
            continue
        heading = re.match(r"^(#{1,6})\s+(.*)$", raw)
        if heading:
            flush()
            level, title = len(heading.group(1)), heading.group(2).strip()
            if level == 1 and not seen_title:
                seen_title = True  # the page's title: NAME says it
            elif level <= 2:
                out.append('.SH "' + inline(title).upper().replace('"', "") + '"')
            else:
                out.append('.SS "' + inline(title).replace('"', "") + '"')
            i += 1
            continue
        if stripped.startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1]):
            flush()
            header = table_cells(raw)
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = table_cells(lines[i])
                out.append(".TP")
                out.append(line(inline(cells[0])))
                rest = [f"{h}: {c}" if h else c for h, c in zip(header[1:], cells[1:])]
                for n, text in enumerate(rest):
                    if n:
                        out.append(".br")
                    out.append(line(inline(text)))
                i += 1
            continue
        item = re.match(r"^(\s*)(-|\*|\d+\.)\s+(.*)$", raw)
        if item:
            flush()
            indent = len(item.group(1))
            mark = "\\(bu" if item.group(2) in ("-", "*") else item.group(2)
            text = [item.group(3)]
            i += 1
            # The item goes on over lines indented past its marker.
            while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent \
                    and not re.match(r"^\s*(-|\*|\d+\.)\s+", lines[i]):
                text.append(lines[i].strip())
                i += 1
            out.append(f".IP {mark} {4 + indent}")
            out.append(line(inline(" ".join(text))))
            continue
        if not stripped:
            flush()
            i += 1
            continue
        paragraph.append(raw)
        i += 1
    flush()
    out += [".SH SEE ALSO", ".BR basal (1),", ".BR basal\\-run (1),", ".BR basal\\-flow (1),",
            ".BR basal\\-policy (1)"]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page")
    ap.add_argument("--name", required=True)
    ap.add_argument("--section", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out")
    args = ap.parse_args()
    with open(args.page, encoding="utf-8") as f:
        text = convert(f.read(), args.name, args.section, args.summary, args.version)
    if args.out:
        with open(args.out, "w", encoding="ascii") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
