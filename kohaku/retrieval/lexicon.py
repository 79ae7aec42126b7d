"""What a question's words are called in the document: a small accounting lexicon.

A question says "cash flow statement", "P&L", "capex", "DPO"; a filing's headings and rows say
"Consolidated Statements of Cash Flows", "Statements of Operations", "Purchases of property,
plant and equipment", "Accounts payable" and "Cost of sales". Neither dense nor term matching
bridges those names, so the evidence rescoring (kohaku/retrieval/evidence.py, feature
``lexicon``) also scores a node by the document's own names of what the question asks for.

The entries are the names the primary financial statements go by under US GAAP and IFRS, and
the line items the common analyst measures are computed from (the textbook definition of each
ratio: a ratio's question is answered from its inputs' rows). Nothing here names a company, a
filing or a question set; a question that mentions none of these words gets no expansion, so
a corpus of other documents is ranked as without it. ``RetrieveConfig.evidence.lexicon``
chooses the table: ``finance`` (this one) or ``none``.
"""

from __future__ import annotations

import re

# (what a question says, what a document calls it): a regex over the folded question (lower
# case), and the words its rows and headings use
FINANCE: tuple[tuple[str, str], ...] = (
    # the statements
    (r"cash ?flows? statement|statements? of cash ?flows?", "statements of cash flows"),
    (r"income statement|p ?& ?l\b|profit and loss|statements? of (?:operations|income|earnings)",
     "statements of operations income earnings"),
    (r"balance sheet|statements? of financial position", "balance sheets financial position"),
    (r"(?:shareholders|stockholders)'? equity statement|statements? of (?:shareholders|stockholders)'? equity",
     "statements of shareholders stockholders equity"),
    (r"comprehensive income", "statements of comprehensive income"),
    (r"segment", "segment information reportable segments"),
    # line items under other names
    (r"capital expenditures?|\bcapex\b|capital spending",
     "statements of cash flows purchases of property plant and equipment capital expenditures"),
    (r"\bcogs\b|cost of goods sold", "cost of sales cost of revenue"),
    (r"\brevenues?\b|top line|\bsales\b", "total revenues net sales"),
    (r"\bsg ?& ?a\b", "selling general and administrative expenses"),
    (r"\bd ?& ?a\b|depreciation (?:and|&) amortization", "depreciation and amortization"),
    (r"\bebitda\b", "operating income depreciation and amortization"),
    (r"operating (?:income|profit)|\bebit\b", "operating income income from operations"),
    (r"net (?:income|profit|earnings)|bottom line", "net income net earnings"),
    (r"\beps\b|earnings per share", "earnings per share diluted"),
    (r"dividends?", "cash dividends paid per share"),
    (r"buy ?backs?|repurchases?", "repurchases of common stock"),
    # measures computed from the statements' rows (their inputs)
    (r"free cash ?flow", "statements of cash flows net cash provided by operating activities purchases of property and equipment"),
    (r"operating cash ?flow|cash from operations", "statements of cash flows net cash provided by operating activities"),
    (r"working capital|current ratio|liquidity", "balance sheets total current assets total current liabilities"),
    (r"quick ratio", "balance sheets cash and cash equivalents accounts receivable total current liabilities"),
    (r"capital[- ]intensive|fixed asset turnover|\bppn?e\b|pp ?& ?e", "property plant and equipment net total assets"),
    (r"return on assets|\broa\b|asset turnover", "net income total assets"),
    (r"return on equity|\broe\b", "net income total shareholders equity"),
    (r"gross (?:margin|profit)", "statements of operations income gross profit net sales cost of sales"),
    (r"operating margin", "statements of operations income operating income total revenue net sales"),
    (r"(?:effective )?tax rate", "statements of operations income provision for income taxes income before income taxes"),
    (r"days payable|\bdpo\b|payables? turnover", "balance sheets accounts payable cost of sales inventories"),
    (r"days sales|\bdso\b|receivables? turnover", "accounts receivable net sales"),
    (r"inventory turnover|days inventory|\bdio\b", "inventories cost of sales"),
    (r"interest coverage", "operating income interest expense"),
    (r"debt|leverage|solvency", "long-term debt total liabilities shareholders equity"),
)
LEXICONS = {"finance": FINANCE, "none": ()}


def expansions(question: str, lexicon: str = "finance") -> list[str]:
    """The document-side names of what ``question`` asks for, one text per lexicon entry it
    mentions, in the lexicon's order (none for a question that mentions no entry)."""
    table = LEXICONS[lexicon]
    folded = " ".join(question.lower().replace("’", "'").split())
    return [names for pattern, names in table if re.search(pattern, folded)]
