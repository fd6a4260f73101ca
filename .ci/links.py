"""Checks the links of the book's pages (docs/*.md, docs/*/*.md, ...) and of README.md, as
written: every relative link names a file of the repository, and a #fragment names a
heading (or an explicit id) of the page it points to; every such page is in docs/SUMMARY.md.
Prints each broken link as FILE:LINE: LINK (why) and exits 1 if there is any.
Usage: python3 .ci/links.py (from anywhere; .ci/book.sh runs it)."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
ID = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")


def slug(heading):
    """The id mdBook (and GitHub) give a heading: lower case, punctuation dropped."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path):
    fence = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith(("```", "~~~")):
                fence = not fence
                continue
            if not fence:
                yield number, line


ANCHORS = {}


def anchors(path):
    if path not in ANCHORS:
        found, seen = set(), {}
        for _, line in lines_outside_code(path):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(ID.findall(line))
        ANCHORS[path] = found
    return ANCHORS[path]


def check(page, problems):
    here = os.path.dirname(page)
    for number, line in lines_outside_code(page):
        # inline code spans hold example links, not links
        for url in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-zA-Z][a-zA-Z+.-]*:", url) or url.startswith("<"):
                continue
            path, _, fragment = url.partition("#")
            target = os.path.normpath(os.path.join(here, path)) if path else page
            where = f"{os.path.relpath(page, ROOT)}:{number}: {url}"
            if not target.startswith(ROOT + os.sep):
                problems.append(f"{where} (outside the repository)")
            elif not os.path.exists(target):
                problems.append(f"{where} (no such file)")
            elif fragment and target.endswith(".md") and fragment not in anchors(target):
                problems.append(f"{where} (no heading #{fragment} in {os.path.relpath(target, ROOT)})")


def main():
    docs = os.path.join(ROOT, "docs")
    pages = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(docs)
        for name in names
        if name.endswith(".md")
    )
    problems = []
    for page in pages + [os.path.join(ROOT, "README.md")]:
        check(page, problems)
    summary = open(os.path.join(docs, "SUMMARY.md"), encoding="utf-8").read()
    listed = set(re.findall(r"\]\(([^)#]+\.md)\)", summary))
    for page in pages:
        name = os.path.relpath(page, docs).replace(os.sep, "/")
        if name != "SUMMARY.md" and name not in listed:
            problems.append(f"docs/{name}: not in docs/SUMMARY.md (the book would leave it out)")
    for problem in problems:
        print(problem)
    print(f"links: {len(pages) + 1} pages, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


sys.exit(main())
