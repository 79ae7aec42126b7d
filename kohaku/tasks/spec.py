"""What a competition is: the task spec, one dataclass per part, built from ``conf/task/<name>.yaml``.

A task says what one competition asks and how it scores; the stages read it and know no
competition by name (lm-evaluation-harness's task YAML is the model). Its parts:

- ``questions``: the file format (csv, jsonl), the id and question columns, and the other
  columns a prompt may use (``{answer_unit}``); each must be in the file.
- ``answer``: the JSON answer's fields and types (text, number, list, choice, refs), which field
  is the value that is voted and scored and which holds the cited documents, the prompt
  templates per order, abstention (``allowed`` with its blank tokens, or ``never``) and what
  makes a sample blank.
- ``vote``: how samples are grouped (a named grouping: the default task's, ``amounts``,
  ``text``, ``name``) and whether the submission keeps the winner's surface form.
- ``submission``: the writer (the default task's competition CSV, or ``columns``: output
  column -> answer field) and its cell formats.
- ``solutions``: where the answers are in the solutions file, for scoring.
- ``score``: the scorer (the default task's: its competition's metric, exactly; ``components``: a
  weighted sum of named metrics, each over the questions it covers, such as ``kind_value``, each
  value by its answer kind, and ``page_pools``), what an unanswered question scores
  (``unanswered``) and the error classes. Pages are counted one way per side:
  ``submission.page_base`` and ``solutions.page_base`` (:meth:`Task.check_page_bases`).
- ``gold``: gold evidence for retrieval evaluation (documents; document + page; text).
- ``answer.kinds`` (optional): a questions column names each question's kind (number, boolean,
  name, names, date, text), which picks the value's JSON schema, the prompt's
  ``{kind_instruction}``, how samples are grouped in the vote, how the value is written and how
  many cited pages it keeps; a not-answerable token (``N/A``) can be an answer of every kind.
  A task without kinds behaves as before (:mod:`kohaku.tasks.kinds`).

Named functions are resolved through :mod:`kohaku.tasks.named.registry`; a task YAML alone defines a
competition that needs no new code. The defaults below are the default task's names
(:func:`kohaku.tasks.named.catalog.default_names`, read from its room). This module is library code:
no Hydra.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from kohaku.core.config import ConfigError, build
from kohaku.llm.prompts import check_template
from kohaku.retrieval.gold import GoldSpec
from kohaku.core.values import MODEL_BLANK_TOKENS
from kohaku.tasks.named.catalog import default_names
from kohaku.tasks.files.shapes import JsonShape

FORMATS = ("csv", "jsonl", "json")   # jsonl and json: JSON lines or one JSON array of objects
FIELD_TYPES = ("text", "number", "list", "choice", "refs")
ABSTENTION = ("allowed", "never")
ORDERS = ("context_first", "question_first")
REFERENCES = ("doc", "doc_page")
KIND_TYPES = ("number", "boolean", "name", "names", "date", "text")
LIST_FORMATS = ("python", "json", "semicolon")
WRITERS_WITH_COLUMNS = ("columns", "json")
DUPLICATES = ("first", "last", "error")   # submission.duplicates
PAGE_READINGS = ("number", "integer")      # submission.pages
#: the default task's names (its room's DEFAULTS): the task name and the functions a task that
#: names none takes
DEFAULT = default_names()
# Placeholders every answer prompt may use; a task adds its questions.fields.
BASE_PROMPT_FIELDS = ("context", "question", "qid")
# ... and, with answer.kinds, the question's kind and its instruction
KIND_PROMPT_FIELDS = ("kind", "kind_instruction")


@dataclass
class QuestionsSpec:
    format: str = "csv"               # csv | jsonl | json (either: JSON lines or a JSON array of objects)
    id: str = "id"                    # question id column (becomes qid)
    question: str = "question"        # question text column
    fields: list[str] = field(default_factory=lambda: ["answer_unit"])  # columns prompts may use

    def validate(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(f"task.questions.format={self.format!r}; use one of {', '.join(FORMATS)}")


@dataclass
class KindSpec:
    """One answer kind of ``answer.kinds.types``: what the value is and how it is handled."""

    type: str                         # number | boolean | name | names | date | text
    instruction: str | None = None    # the prompt's {kind_instruction}; null: the type's default
    max_chars: int = 280              # name, names' items and text: maxLength in the schema
    max_items: int | None = None      # names: maxItems in the schema (null: no limit)
    max_pages: int | None = None      # references: at most this many cited pages (null: all)
    similarity: float | None = None   # text: token F1 at which two samples agree; null: the first
    #                                   non-blank sample wins

    # reading a submitted value as strictly as the competition's scorer (scoring only; the gold
    # is read by kohaku's rules). number: only what Python's float() reads ("0.25%", "$5", "1,200",
    # "1.5 million" are no number); false: kohaku's amount rules
    strict: bool = False
    # names: a submitted string that is no list is split on it ("a, b" with ",": two names);
    # null: on ";" when the string has one
    delimiter: str | None = None
    # names: a submitted string that looks like a list ("['a', 'b']") is that list; false: in a
    # JSON submission only an array is a list (a string is split on delimiter, else one name)
    list_text: bool = True

    def validate(self) -> None:
        if self.type not in KIND_TYPES:
            raise ConfigError(f"type={self.type!r}; use one of {', '.join(KIND_TYPES)}")
        if self.max_chars < 1:
            raise ConfigError("max_chars must be >= 1")
        for key in ("max_items", "max_pages"):
            if getattr(self, key) is not None and getattr(self, key) < 0:
                raise ConfigError(f"{key} must be >= 0 or null")
        if self.similarity is not None and not 0 < self.similarity <= 1:
            raise ConfigError(f"similarity={self.similarity}; use a token F1 in (0, 1] or null")
        if self.delimiter is not None and not str(self.delimiter):
            raise ConfigError("delimiter is empty; give the separator (e.g. ',') or null")
        for key, types in (("strict", ("number",)), ("delimiter", ("names",)), ("list_text", ("names",))):
            default = KindSpec.__dataclass_fields__[key].default
            if getattr(self, key) != default and self.type not in types:
                raise ConfigError(f"{key} reads a {' or '.join(types)} value; this kind's type is {self.type}")


@dataclass
class KindsSpec:
    """``answer.kinds``: per-question answer kinds (kohaku.tasks.kinds). ``column: null`` (the
    default): no kinds, every question answered with ``answer.fields`` as declared."""

    column: str | None = None         # the questions column naming each question's kind
    types: dict[str, dict[str, Any]] = field(default_factory=dict)   # kind name -> KindSpec
    default: str | None = None        # the kind of a question whose cell is empty (null: an error)
    not_answerable: str | None = None  # e.g. "N/A": an answer of every kind, voted as a value,
    #                                    never a blank (never retried), written as is
    write_true: str = "true"          # a boolean as written: true | True | 1 | Yes ...
    write_false: str = "false"        # (YAML reads a bare true: key as a boolean: hence write_)
    true_values: list[str] = field(default_factory=lambda: ["true", "yes"])    # read as true
    false_values: list[str] = field(default_factory=lambda: ["false", "no"])   # (any case)
    list_format: str = "json"         # names: json ["a", "b"] | python ['a','b'] | semicolon a;b

    @property
    def enabled(self) -> bool:
        return self.column is not None

    @property
    def specs(self) -> dict[str, KindSpec]:
        out = {}
        for name, values in self.types.items():
            where = f"task.answer.kinds.types.{name}"
            try:
                out[name] = build(KindSpec, values, where)
            except ConfigError as exc:
                raise ConfigError(str(exc) if where in str(exc) else f"{where}: {exc}") from exc
        return out

    def validate(self) -> None:
        if not self.enabled:
            return
        if not self.types:
            raise ConfigError("task.answer.kinds.column is set but task.answer.kinds.types is empty; "
                              "map each kind name of the column to {type: number|boolean|name|names|"
                              "date|text}")
        self.specs  # noqa: B018 - builds (validates) every kind
        if self.default is not None and self.default not in self.types:
            raise ConfigError(f"task.answer.kinds.default={self.default!r} is not a kind of "
                              f"task.answer.kinds.types ({', '.join(self.types)})")
        if self.list_format not in LIST_FORMATS:
            raise ConfigError(f"task.answer.kinds.list_format={self.list_format!r}; use one of "
                              f"{', '.join(LIST_FORMATS)}")
        truth = {v.strip().lower() for v in self.true_values} | {self.write_true.strip().lower()}
        falsity = {v.strip().lower() for v in self.false_values} | {self.write_false.strip().lower()}
        if truth & falsity or not self.write_true.strip() or not self.write_false.strip():
            raise ConfigError(f"task.answer.kinds: true ({self.write_true!r}, {self.true_values}) and "
                              f"false ({self.write_false!r}, {self.false_values}) must be non-empty and "
                              "distinct")
        if self.not_answerable is not None and not self.not_answerable.strip():
            raise ConfigError("task.answer.kinds.not_answerable is empty; give the token (e.g. N/A) or null")


@dataclass
class AnswerSpec:
    # JSON fields in the order the model writes them, name -> type (text|number|list|choice|refs).
    # No default: Hydra merges a mapping into its schema default, so a default here would add
    # its keys to every task's fields.
    fields: dict[str, str] = field(default_factory=dict)
    value: str = "answer_value"       # the field that is voted on, submitted and scored
    refs: str | None = "ref_id"       # the field with the cited document ids (type refs), or null
    choices: dict[str, list[str]] = field(default_factory=dict)   # allowed values of choice fields
    prompts: dict[str, dict[str, str]] = field(default_factory=dict)  # {order: {system, user}}
    abstention: str = "allowed"       # allowed: a sample may abstain (blank_values); never
    # a sample whose value is one of these abstains
    blank_values: list[str] = field(default_factory=lambda: list(MODEL_BLANK_TOKENS))
    blank_without_refs: bool = True   # a sample that cites no document is blank
    fallback: str = ""                # abstention=never: the answer written when no sample gave one
    kinds: KindsSpec = field(default_factory=KindsSpec)   # per-question kinds (off by default)

    @property
    def abstain_values(self) -> list[str]:
        """``blank_values`` without the not-answerable token, which is an answer
        (``kinds.not_answerable``)."""
        token = (self.kinds.not_answerable or "").strip().lower() if self.kinds.enabled else None
        return [b for b in self.blank_values if token is None or b.strip().lower() != token]

    @property
    def scoring_only(self) -> bool:
        """No answer fields and no prompts: a task that only scores submission files."""
        return not self.fields and not self.prompts

    def require(self) -> None:
        """Raise unless the task can write answers (a scoring-only task cannot run the pipeline)."""
        if self.scoring_only:
            raise ConfigError("task.answer.fields and task.answer.prompts are empty: this task only "
                              "scores files (scripts/score.py --task); give the answer's fields and "
                              "prompts to run the pipeline with it")

    def validate(self) -> None:
        if self.scoring_only:
            return
        if not self.fields:
            raise ConfigError("task.answer.fields is empty; list the answer's JSON fields, e.g. "
                              "{answer: text, ref_id: refs}")
        for name, kind in self.fields.items():
            if kind not in FIELD_TYPES:
                raise ConfigError(f"task.answer.fields.{name}={kind!r}; use one of {', '.join(FIELD_TYPES)}")
            if kind == "choice" and not self.choices.get(name):
                raise ConfigError(f"task.answer.fields.{name} is a choice; list its values in "
                                  f"task.answer.choices.{name}")
        if self.value not in self.fields or self.fields[self.value] == "refs":
            raise ConfigError(f"task.answer.value={self.value!r} must name a non-refs field of "
                              f"task.answer.fields ({', '.join(self.fields)})")
        if self.refs is not None and self.fields.get(self.refs) != "refs":
            raise ConfigError(f"task.answer.refs={self.refs!r} must name a field of type refs in "
                              "task.answer.fields (or be null)")
        if self.abstention not in ABSTENTION:
            raise ConfigError(f"task.answer.abstention={self.abstention!r}; use one of {', '.join(ABSTENTION)}")
        if self.abstention == "never" and not self.fallback.strip():
            raise ConfigError("task.answer.abstention=never needs task.answer.fallback: the answer "
                              "written when no sample gives one (a task that never abstains never "
                              "writes a blank)")
        if self.blank_without_refs and self.refs is None:
            raise ConfigError("task.answer.blank_without_refs=true needs a refs field (task.answer.refs)")
        if not self.prompts:
            raise ConfigError("task.answer.prompts is empty; give {context_first: {system, user}, "
                              "question_first: {...}}")
        for order, pair in self.prompts.items():
            if order not in ORDERS:
                raise ConfigError(f"task.answer.prompts.{order}: unknown prompt order; use {', '.join(ORDERS)}")
            if set(pair) != {"system", "user"}:
                raise ConfigError(f"task.answer.prompts.{order} needs exactly the keys system and user")
        self.kinds.validate()

    @property
    def text_fields(self) -> list[str]:
        return [n for n, k in self.fields.items() if k != "refs"]


@dataclass
class VoteSpec:
    group: str = DEFAULT["group"]     # the default task's | amounts | text | name | package.module:function
    tolerance: float = 0.001          # relative tolerance of numbers (amounts)
    keep_surface: bool = False        # submit the winner as written (else its canonical form)


@dataclass
class SubmissionSpec:
    writer: str = DEFAULT["writer"]   # the default task's (its competition's CSV) | columns | json | module:function
    # columns writer: output column -> source: qid, question, value, answer, explanation, refs,
    # ref_pages, agreement, any answer field or question column
    columns: dict[str, str] = field(default_factory=dict)
    list_format: str = "python"       # python ['a','b'] | json ["a","b"] | semicolon a;b
    blank: str = "is_blank"           # the cell of a field with no value
    # reading a competition's own JSON submission (kohaku.tasks.files.shapes): {keyed: {location:
    # [columns]}, id: column} for objects keyed by question id; {}: the writer's CSV or document
    shape: dict[str, Any] = field(default_factory=dict)
    # json writer (kohaku.tasks.files.documents): submission.json, a document of the answers; the flat
    # submission.csv of `columns` is written beside it (what kohaku scores and compares)
    document: dict[str, Any] = field(default_factory=dict)   # constant top-level keys (team, ...)
    answers_key: str = "answers"      # the top-level key holding the list of answer objects
    answer: dict[str, str] = field(default_factory=dict)     # answer object key -> source
    reference: dict[str, str] = field(default_factory=dict)  # reference object key -> doc_id,
    #                                   page or a column of the metadata file
    page_base: int = 1                # 0: reference pages counted from 0 (page_index); 1: from 1
    metadata: str | None = None       # CSV with an id column and the reference columns, relative
    #                                   to corpus.root; null: corpus.metadata
    schema: str | None = None         # JSON schema file the document (json) or each row (columns)
    #                                   must pass before it is written (kohaku.core.schema_check)

    # json writer: non-ASCII escaped as \uXXXX (json.dump's default), for a reader that decodes
    # the file as ASCII or another encoding; false: raw UTF-8
    ensure_ascii: bool = False
    # scoring a submission (score.py, compare): a question answered more than once scores its
    # first row (first), its last (last, as a scorer filling a dict does) or is refused (error);
    # the ids are reported either way
    duplicates: str = "first"
    # a cited page: number (an integral number, 88 or 88.0; 88.5 is no page) | integer (integer
    # digits only: 88.0 is no page either); an item that is no page matches no gold page
    pages: str = "number"
    # a cited document id read without its surrounding spaces; false: as written ("abc " is not "abc")
    trim_doc_ids: bool = True

    def validate(self) -> None:
        if self.list_format not in LIST_FORMATS:
            raise ConfigError(f"task.submission.list_format={self.list_format!r}; use python, json or semicolon")
        if self.duplicates not in DUPLICATES:
            raise ConfigError(f"task.submission.duplicates={self.duplicates!r}; use one of "
                              f"{', '.join(DUPLICATES)}")
        if self.pages not in PAGE_READINGS:
            raise ConfigError(f"task.submission.pages={self.pages!r}; use one of {', '.join(PAGE_READINGS)}")
        if self.writer in WRITERS_WITH_COLUMNS:
            if not self.columns:
                raise ConfigError(f"task.submission.writer={self.writer} needs task.submission.columns "
                                  "(output column -> source; the json writer's flat submission.csv)")
            if "qid" not in self.columns.values():
                raise ConfigError("task.submission.columns must write the question id (a column "
                                  "whose source is qid)")
        if self.writer == "json":
            if not self.answer or "qid" not in self.answer.values():
                raise ConfigError("task.submission.writer=json needs task.submission.answer (answer "
                                  "object key -> source) with the question id (source qid)")
            if "references" in self.answer.values() and not self.reference:
                raise ConfigError("task.submission.answer names references but task.submission.reference "
                                  "is empty; give the reference object's keys, e.g. {pdf_sha1: "
                                  "pdf_sha1, page_index: page}")
        if self.page_base not in (0, 1):
            raise ConfigError(f"task.submission.page_base={self.page_base}; use 0 or 1")
        build(JsonShape, self.shape, "task.submission.shape")


@dataclass
class SolutionsSpec:
    format: str | None = None         # csv | jsonl | json; null: from the file's extension
    id: str = "id"                  # the question id column
    answer: str = "answer_value"      # the gold answer column
    refs: str | None = "ref_id"       # gold document ids, or null
    # the number of the first page in the solutions' page cells (pools, pages): 0 or 1; null:
    # the submission's (task.submission.page_base)
    page_base: int | None = None
    # reading a competition's own JSON gold (kohaku.tasks.files.shapes): {records: "*.questions"} for
    # records nested in the document, {keyed: {location: [columns]}} for objects keyed by id; {}:
    # a CSV, JSON lines or a JSON array of objects (format)
    shape: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        build(JsonShape, self.shape, "task.solutions.shape")
        if self.format is not None and self.format not in FORMATS:
            raise ConfigError(f"task.solutions.format={self.format!r}; use one of {', '.join(FORMATS)} or null")
        if self.page_base not in (None, 0, 1):
            raise ConfigError(f"task.solutions.page_base={self.page_base}; use 0, 1 or null")


LEVELS = ("question", "set")
#: what a metric does with a row whose value is empty: unanswered (it scores
#: score.unanswered) | score (the metric scores it: a page metric sees the cited pages)
EMPTY = ("unanswered", "score")
COMBINE = ("mean", "sum")
ROUNDING = ("python", "half_up", "half_even")


@dataclass
class MetricSpec:
    name: str                         # component name (a column of the score table)
    fn: str                           # registered metric: exact_match, token_f1, numeric_match, llm_judge, ...
    weight: float = 1.0               # weight in the score (0: reported beside it)
    params: dict[str, Any] = field(default_factory=dict)   # the function's settings
    level: str = "question"           # question: one value per question; set: one value for all
    # a row whose value is empty ("", [], null): unanswered (it scores score.unanswered, as a
    # missing row does) | score (the metric scores the row: a page metric sees its cited pages)
    empty: str = "unanswered"

    def validate(self) -> None:
        if self.level not in LEVELS:
            raise ConfigError(f"task.score.metrics[{self.name}].level={self.level!r}; use one of "
                              f"{', '.join(LEVELS)}")
        if self.empty not in EMPTY:
            raise ConfigError(f"task.score.metrics[{self.name}].empty={self.empty!r}; use one of "
                              f"{', '.join(EMPTY)}")


@dataclass
class ScoreSpec:
    scorer: str = DEFAULT["scorer"]   # the default task's (score.variant picks the variant) | components
    metrics: list[dict[str, Any]] = field(default_factory=list)   # components scorer: MetricSpec each
    correct: str | None = None        # component whose value >= 0.5 makes a question correct (classes)
    # error classes: generic | typed (by answer kind, with cited pages) | the default task's |
    # module:function; null: typed for a task with answer.kinds, else the default task's
    classes: str | None = None
    # components scorer: how the competition combines per-question values (mean: each component
    # the mean over its questions; sum: the total of its points) and prints the figures
    combine: str = "mean"             # mean | sum
    round: int | None = None          # decimals of the printed score and components (None: as computed)
    rounding: str = "half_up"         # ties (.x5): half_up (decimal, as written) | half_even | python (round())
    # what every per-question metric gives a question the submission leaves unanswered (no row
    # for it, or an empty value cell); a metric that does not cover the question stays uncovered
    unanswered: float = 0.0

    @property
    def metric_specs(self) -> list[MetricSpec]:
        out = []
        for i, m in enumerate(self.metrics):
            spec = build(MetricSpec, m, f"task.score.metrics[{i}]")
            # every named function declares its params (kohaku.tasks.named.catalog): a misspelled one
            # is refused here, when the task is built
            from kohaku.tasks.named.registry import check_params

            check_params("metric", spec.fn, spec.params, f"task.score.metrics[{i}].params")
            out.append(spec)
        return out

    def validate(self) -> None:
        if self.combine not in COMBINE:
            raise ConfigError(f"task.score.combine={self.combine!r}; use one of {', '.join(COMBINE)}")
        if self.rounding not in ROUNDING:
            raise ConfigError(f"task.score.rounding={self.rounding!r}; use one of {', '.join(ROUNDING)}")
        if self.round is not None and (not isinstance(self.round, int) or self.round < 0):
            raise ConfigError(f"task.score.round={self.round!r}; give a number of decimals (>= 0) or null")
        specs = self.metric_specs          # each metric's params checked, whatever the scorer
        if self.scorer == "components":
            if not specs:
                raise ConfigError("task.score.scorer=components needs task.score.metrics")
            names = [m.name for m in specs]
            if len(set(names)) != len(names):
                raise ConfigError(f"task.score.metrics: component names repeat: {names}")
            if self.correct is not None and self.correct not in names:
                raise ConfigError(f"task.score.correct={self.correct!r} is not a metric name ({', '.join(names)})")


@dataclass
class Task:
    name: str = DEFAULT["name"]     # the task's name (reports, scores.json)
    questions: QuestionsSpec = field(default_factory=QuestionsSpec)  # the questions file: format and columns
    answer: AnswerSpec = field(default_factory=AnswerSpec)  # the answer's JSON fields, prompts and abstention
    vote: VoteSpec = field(default_factory=VoteSpec)  # how samples are grouped and combined
    references: str = "doc"           # doc | doc_page (the pages of the cited documents' blocks)
    # the retrieval lexicon the task asks for (kohaku/retrieval/lexicon.py): planner.lexicon
    # and retrieve.evidence.lexicon follow it (finance: an accounting lexicon's query and
    # evidence feature); none: no lexicon (one query per question under planner=none)
    lexicon: str = "none"
    # retrieve.spread_pages follows it: the scattered-ranking rule (a ranking whose first
    # retrieve.spread_top nodes lie on this many pages places its hits' sentences alone first;
    # long filings); 0: off (docs/measured/selection.md: it costs papers' questions)
    spread_pages: int = 0
    # the submission's writer, columns and cells
    submission: SubmissionSpec = field(default_factory=SubmissionSpec)
    # where the gold answers are in the solutions file
    solutions: SolutionsSpec = field(default_factory=SolutionsSpec)
    score: ScoreSpec = field(default_factory=ScoreSpec)  # the scorer, its metrics and error classes
    gold: GoldSpec = field(default_factory=GoldSpec)  # gold evidence for retrieval evaluation

    def validate(self) -> None:
        self.answer.validate()
        self.submission.validate()
        self.check_page_bases()
        from kohaku.retrieval.lexicon import LEXICONS

        if self.lexicon not in LEXICONS:
            raise ConfigError(f"task.lexicon={self.lexicon!r}; use one of {', '.join(LEXICONS)}")
        if not isinstance(self.spread_pages, int) or self.spread_pages < 0:
            raise ConfigError(f"task.spread_pages={self.spread_pages!r}; give a number of pages >= 0 (0: off)")
        if self.references not in REFERENCES:
            raise ConfigError(f"task.references={self.references!r}; use one of {', '.join(REFERENCES)}")
        if self.submission.reference and self.references != "doc_page":
            raise ConfigError("task.submission.reference (pages as objects) needs task.references=doc_page")
        allowed = self.prompt_fields
        for order, pair in self.answer.prompts.items():
            for part, text in pair.items():
                check_template(text, allowed, f"task.answer.prompts.{order}.{part}")

    @property
    def gold_page_base(self) -> int:
        """How the solutions number their pages (``solutions.page_base``, else the submission's)."""
        return self.submission.page_base if self.solutions.page_base is None else self.solutions.page_base

    def check_page_bases(self) -> None:
        """One page base per side: a metric's ``params.page_base`` (``gold_page_base``) must say
        what ``submission.page_base`` (``solutions.page_base``) says; every writer, reader and
        metric reads pages with the task's."""
        task_bases = {"page_base": ("task.submission.page_base", self.submission.page_base),
                      "gold_page_base": ("task.solutions.page_base", self.gold_page_base)}
        for i, m in enumerate(self.score.metrics):
            params = (m.get("params") if isinstance(m, dict) else None) or {}
            for key, (where, base) in task_bases.items():
                if key in params and params[key] is not None and int(params[key]) != base:
                    raise ConfigError(
                        f"task.score.metrics[{i}].params.{key}={params[key]} disagrees with {where}="
                        f"{base}; pages are counted one way per task: drop the metric's {key} and set "
                        f"{where}")

    @property
    def error_classes(self) -> str:
        """The error classes' function: ``score.classes``, else ``typed`` for a task with answer
        kinds (kohaku.tasks.analysis.typed_classes), else the default task's."""
        if self.score.classes is not None:
            return self.score.classes
        return "typed" if self.answer.kinds.enabled else DEFAULT["classes"]

    @property
    def prompt_fields(self) -> tuple[str, ...]:
        kinds = KIND_PROMPT_FIELDS if self.answer.kinds.enabled else ()
        return (*BASE_PROMPT_FIELDS, *kinds, *self.questions.fields)


def build_task(values: Any, where: str = "task") -> Task:
    """The Task from plain data (a composed config's ``task`` section or a loaded YAML); every
    part validated, errors naming the key. A value of the wrong type or shape that a part's
    check does not name (a list where a mapping is read, text where a number is) is a
    ConfigError naming ``where`` too."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: a task is a mapping of its parts; got {type(values).__name__}")
    try:
        return build(Task, values, where)
    except ConfigError:
        raise
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError) as exc:
        raise ConfigError(f"{where}: a value has the wrong type or shape ({type(exc).__name__}: "
                          f"{str(exc)[:200]}); compare the task with the task keys of docs/reference/task.md "
                          "and a task of conf/task/") from exc
