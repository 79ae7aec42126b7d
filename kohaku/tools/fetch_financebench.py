#!/usr/bin/env python
"""Lay out a kohaku corpus from a local copy of the public FinanceBench repository.

    python scripts/fetch_financebench.py SRC OUT [--docs N] [--max-pages P] [--doc-list FILE] [--page-budget P]

SRC is a clone of https://github.com/patronus-ai/financebench: either a normal checkout
(``data/*.jsonl``, ``pdfs/*.pdf``) or a git directory without a work tree (a bare clone or mirror;
files are read with ``git cat-file``). Only ``data/financebench_open_source.jsonl``,
``data/financebench_document_information.jsonl`` and ``pdfs/<doc_name>.pdf`` are read; the
repository's ``results/`` folder (models' answers with human labels) is never opened.

OUT gets:

- ``metadata.csv``: kohaku's columns (id, type, title, year, citation, url) plus company,
  doc_type, doc_period, gics_sector; id = doc_name, title such as "3M 2018 10-K";
- ``pdfs/<doc_name>.pdf``: hard links to the checkout's files where possible, else copies;
- ``questions.jsonl``: one line per question whose filing is present (financebench_id,
  question, answer, doc_name, company, question_type, question_reasoning, justification);
- ``evidence.csv``: the gold evidence, one row per evidence item (financebench_id, doc_name,
  page, evidence_text); ``page`` is the source's ``evidence_page_num``, counted from 0 (the task's
  gold section says ``page_base: 0``).

A subset of filings: ``--doc-list FILE`` (one doc_name a line), ``--max-pages P`` (filings of at
most P pages), ``--docs N`` (the N smallest by page count, ties by name), ``--page-budget P``
(the filings with the most questions per page, while their pages add up to at most P); always
only filings that have questions. Missing PDFs (a snapshot may lack some) are listed with the questions
dropped for them. The gold pages are checked on up to ``--verify`` evidence items: the evidence
text must be contained in the text of its 0-based page (kohaku.retrieval.gold.text_containment
>= 0.8); the script prints how many were checked and where they matched.

Nothing here downloads: fetch the repository first (``git clone``; its PDFs are in git).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

from kohaku.retrieval.gold import CONTAINMENT, text_containment  # noqa: E402

QUESTIONS = "data/financebench_open_source.jsonl"
DOCUMENTS = "data/financebench_document_information.jsonl"
QUESTION_FIELDS = ("financebench_id", "question", "answer", "doc_name", "company", "question_type",
                   "question_reasoning", "justification")
METADATA_FIELDS = ("id", "type", "title", "year", "citation", "url", "company", "doc_type",
                   "doc_period", "gics_sector")
EVIDENCE_FIELDS = ("financebench_id", "doc_name", "page", "evidence_text")
DOC_TYPES = {"10k": "10-K", "10q": "10-Q", "8k": "8-K", "earnings": "Earnings",
             "10k_annualreport": "Annual Report"}


class FetchError(SystemExit):
    pass


def _allowed(path: str) -> str:
    if path.split("/", 1)[0] == "results" or path not in (QUESTIONS, DOCUMENTS) and not (
            path.startswith("pdfs/") and path.endswith(".pdf") and "/" not in path[5:]):
        raise FetchError(f"{path}: not a file this script reads (results/ is held out)")
    return path


@dataclass
class Source:
    """A FinanceBench copy: a checkout folder or a git directory read with ``git cat-file``."""

    root: Path
    git_dir: bool

    @classmethod
    def open(cls, root: str | Path) -> "Source":
        root = Path(root).expanduser()
        if not root.exists():
            raise FetchError(f"{root}: no such folder; clone https://github.com/patronus-ai/financebench")
        if (root / QUESTIONS).is_file():
            return cls(root, False)
        if (root / "HEAD").is_file() and (root / "objects").is_dir():
            return cls(root, True)
        raise FetchError(f"{root}: neither a FinanceBench checkout ({QUESTIONS}) nor a git directory")

    def _git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["git", f"--git-dir={self.root}", *args], capture_output=True,
                              check=check)

    def has(self, path: str) -> bool:
        _allowed(path)
        if not self.git_dir:
            return (self.root / path).is_file()
        return self._git("cat-file", "-e", f"HEAD:{path}", check=False).returncode == 0

    def read(self, path: str) -> bytes:
        _allowed(path)
        if not self.git_dir:
            return (self.root / path).read_bytes()
        try:
            return self._git("cat-file", "blob", f"HEAD:{path}").stdout
        except subprocess.CalledProcessError as exc:
            raise FetchError(f"{self.root}: cannot read {path}: {exc.stderr.decode().strip()}")

    def copy(self, path: str, dest: Path) -> None:
        """``path`` to ``dest``: a hard link to a checkout's file where possible, else a copy."""
        dest.unlink(missing_ok=True)
        if not self.git_dir:
            try:
                os.link(self.root / path, dest)
            except OSError:
                shutil.copyfile(self.root / path, dest)
            return
        dest.write_bytes(self.read(path))

    def jsonl(self, path: str) -> list[dict]:
        return [json.loads(line) for line in self.read(path).decode("utf-8").splitlines()
                if line.strip()]


def page_texts(pdf: bytes | Path) -> list[str]:
    """The text of every page (pdfium), index = 0-based page number."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    try:
        out = []
        for i in range(len(doc)):
            page = doc[i]
            tp = page.get_textpage()
            out.append(tp.get_text_range())
            tp.close()
            page.close()
        return out
    finally:
        doc.close()


def page_count(pdf: bytes | Path) -> int:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    try:
        return len(doc)
    finally:
        doc.close()


def title_of(info: dict) -> str:
    """"3M 2018 10-K", "AMCOR 2023 Q4 Earnings", "BESTBUY 2023 8-K 2023-04-24"."""
    name = info["doc_name"]
    parts = name.split("_")
    period = parts[1] if len(parts) > 1 else str(info.get("doc_period") or "")
    period = period.replace("Q", " Q") if "Q" in period and period[:4].isdigit() else period
    kind = DOC_TYPES.get(str(info.get("doc_type") or "").lower(), str(info.get("doc_type") or ""))
    if "annualreport" in name.lower():
        kind = "Annual Report"
    dated = name.split("_dated-", 1)[1] if "_dated-" in name else ""
    return " ".join(x for x in (str(info.get("company") or parts[0]), period, kind, dated) if x)


def metadata_row(info: dict) -> dict:
    title = title_of(info)
    return {"id": info["doc_name"], "type": "filing", "title": title,
            "year": str(info.get("doc_period") or ""),
            "citation": f"{info.get('company', '')}, {title} (FinanceBench)",
            "url": info.get("doc_link") or "", "company": info.get("company") or "",
            "doc_type": info.get("doc_type") or "", "doc_period": str(info.get("doc_period") or ""),
            "gics_sector": info.get("gics_sector") or ""}


def select_docs(pages: dict[str, int], n_docs: int | None, max_pages: int | None,
                doc_list: list[str] | None, page_budget: int | None = None,
                n_questions: dict[str, int] | None = None) -> list[str]:
    """The filings kept: in ``doc_list`` (when given), of at most ``max_pages`` pages, then the
    ``n_docs`` smallest by page count (ties by name), or with ``page_budget`` the filings with
    the most questions per page first (ties: fewer pages, then name), each taken while the
    pages so far fit the budget (one that does not fit is passed over); sorted by name."""
    names = sorted(pages)
    if doc_list is not None:
        names = [n for n in names if n in set(doc_list)]
    if max_pages is not None:
        names = [n for n in names if pages[n] <= max_pages]
    if n_docs is not None:
        names = sorted(names, key=lambda n: (pages[n], n))[:n_docs]
    if page_budget is not None:
        counts = n_questions or {}
        ranked = sorted(names, key=lambda n: (-counts.get(n, 0) / max(pages[n], 1), pages[n], n))
        names, used = [], 0
        for n in ranked:
            if used + pages[n] <= page_budget:
                names.append(n)
                used += pages[n]
    return sorted(names)


def write_csv(path: Path, fields: tuple[str, ...], rows: list[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: r.get(k, "") for k in fields} for r in rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


def verify_pages(out: Path, evidence: list[dict], limit: int) -> dict[str, int]:
    """Check up to ``limit`` evidence items (spread over the filings, in order) against the
    text of their page: counts of items found on the 0-based page, one page later (1-based),
    one page earlier, and nowhere near."""
    counts = {"checked": 0, "page": 0, "page+1": 0, "page-1": 0, "not_found": 0}
    if limit <= 0:
        return counts
    by_doc: dict[str, list[dict]] = {}
    for e in evidence:
        if str(e["evidence_text"]).strip():
            by_doc.setdefault(e["doc_name"], []).append(e)
    picked: list[dict] = []
    while len(picked) < limit and any(by_doc.values()):  # round robin over the filings
        for doc in sorted(by_doc):
            if by_doc[doc] and len(picked) < limit:
                picked.append(by_doc[doc].pop(0))
    texts: dict[str, list[str]] = {}
    for e in picked:
        doc = e["doc_name"]
        if doc not in texts:
            texts[doc] = page_texts(out / "pdfs" / f"{doc}.pdf")
        pages = texts[doc]
        p = int(e["page"])
        counts["checked"] += 1
        for label, q in (("page", p), ("page+1", p + 1), ("page-1", p - 1)):
            if 0 <= q < len(pages) and text_containment(e["evidence_text"], pages[q]) >= CONTAINMENT:
                counts[label] += 1
                break
        else:
            counts["not_found"] += 1
            print(f"  not found near its page: {e['financebench_id']} {doc} page {p} (0-based)")
    return counts


def fetch(src: str | Path, out: str | Path, n_docs: int | None = None,
          max_pages: int | None = None, doc_list: list[str] | None = None,
          verify: int = 20, page_budget: int | None = None) -> dict:
    source = Source.open(src)
    out = Path(out)
    questions = source.jsonl(QUESTIONS)
    infos = {d["doc_name"]: d for d in source.jsonl(DOCUMENTS)}
    asked = sorted({q["doc_name"] for q in questions})
    missing = [d for d in asked if not source.has(f"pdfs/{d}.pdf")]
    present = [d for d in asked if d not in missing]
    dropped = sum(1 for q in questions if q["doc_name"] in missing)
    print(f"{len(questions)} questions on {len(asked)} filings; {len(missing)} PDF(s) missing in "
          f"{source.root}: {', '.join(missing) or 'none'}; {dropped} question(s) dropped for them")
    if doc_list is not None:
        unknown = sorted(set(doc_list) - set(asked))
        if unknown:
            print(f"--doc-list names {len(unknown)} filing(s) without questions, ignored: "
                  f"{', '.join(unknown)}")
        gone = sorted(set(doc_list) & set(missing))
        if gone:
            print(f"--doc-list names {len(gone)} filing(s) whose PDF is missing: {', '.join(gone)}")
    subset = n_docs is not None or max_pages is not None or page_budget is not None
    pages: dict[str, int] = {}
    for d in present:
        if doc_list is None or d in doc_list:
            pages[d] = page_count(source.read(f"pdfs/{d}.pdf")) if subset else -1
    n_questions = {d: sum(1 for q in questions if q["doc_name"] == d) for d in pages}
    keep = select_docs(pages, n_docs, max_pages, doc_list, page_budget, n_questions)
    if not keep:
        raise FetchError("no filing left after --docs/--max-pages/--doc-list/--page-budget")
    (out / "pdfs").mkdir(parents=True, exist_ok=True)
    for d in keep:
        source.copy(f"pdfs/{d}.pdf", out / "pdfs" / f"{d}.pdf")
        if pages[d] < 0:
            pages[d] = page_count(out / "pdfs" / f"{d}.pdf")
    meta = [metadata_row(infos.get(d, {"doc_name": d, "company": d.split("_")[0]})) for d in keep]
    write_csv(out / "metadata.csv", METADATA_FIELDS, meta)
    kept_q = [q for q in questions if q["doc_name"] in set(keep)]
    with open(out / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in kept_q:
            f.write(json.dumps({k: q.get(k) for k in QUESTION_FIELDS}, ensure_ascii=False) + "\n")
    evidence = [{"financebench_id": q["financebench_id"], "doc_name": e.get("doc_name") or q["doc_name"],
                 "page": int(e["evidence_page_num"]), "evidence_text": e.get("evidence_text") or ""}
                for q in kept_q for e in q.get("evidence") or []]
    write_csv(out / "evidence.csv", EVIDENCE_FIELDS, evidence)
    total_pages = sum(pages[d] for d in keep)
    print(f"wrote {out}: {len(keep)} filings, {total_pages} pages, {len(kept_q)} questions, "
          f"{len(evidence)} evidence items")
    for d in keep:
        print(f"  {d}: {pages[d]} pages, {sum(1 for q in kept_q if q['doc_name'] == d)} question(s)")
    counts = verify_pages(out, evidence, verify)
    if counts["checked"]:
        print(f"evidence pages checked: {counts['checked']} item(s); on their 0-based page "
              f"{counts['page']}, one page later {counts['page+1']}, one page earlier "
              f"{counts['page-1']}, not found {counts['not_found']}")
    return {"docs": keep, "pages": {d: pages[d] for d in keep}, "questions": len(kept_q),
            "evidence": len(evidence), "missing": missing, "dropped": dropped, "verify": counts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="FinanceBench checkout or git directory")
    p.add_argument("out", help="corpus folder to write (corpus.root=OUT)")
    p.add_argument("--docs", type=int, help="keep the N smallest filings (by page count)")
    p.add_argument("--max-pages", type=int, help="keep filings of at most P pages")
    p.add_argument("--doc-list", type=Path, help="file with one doc_name a line")
    p.add_argument("--page-budget", type=int,
                   help="keep the filings with the most questions per page while their pages fit P")
    p.add_argument("--verify", type=int, default=20,
                   help="evidence items whose page is checked against the PDF text (0: none)")
    args = p.parse_args(argv)
    doc_list = None
    if args.doc_list:
        doc_list = [x.strip() for x in args.doc_list.read_text().splitlines()
                    if x.strip() and not x.startswith("#")]
    fetch(args.src, args.out, args.docs, args.max_pages, doc_list, args.verify, args.page_budget)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
