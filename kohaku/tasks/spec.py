"""What a competition is: the task spec, one dataclass per part, built from ``conf/task/<name>.yaml``.

A task says what one competition asks and how it scores; the stages read it and know no
competition by name (lm-evaluation-harness's task YAML is the model). Its parts:

- ``questions``: the file format (csv, jsonl), the id and question columns, and the other
  columns a prompt may use (``{answer_unit}``); each must be in the file.
- ``answer``: the JSON answer's fields and types (text, number, list, choice, refs), which field
  is the value that is voted and scored and which holds the cited documents, the prompt
  templates per order, abstention (``allowed`` with its blank tokens, or ``never``) and what
  makes a sample blank.
- ``vote``: how samples are grouped (a named grouping: ``wattbot``, ``amounts``, ``text``,
  ``name``) and whether the submission keeps the winner's surface form.
- ``submission``: the writer (``wattbot``, or ``columns``: output column -> answer field) and
  its cell formats.
- ``solutions``: where the answers are in the solutions file, for scoring.
- ``score``: the scorer (``wattbot``: the competition's metric, exactly; ``components``: a
  weighted sum of named metrics, each over the questions it covers) and the error classes.
- ``gold``: gold evidence for retrieval evaluation (documents; document + page; text).

Named functions are resolved through :mod:`kohaku.tasks.registry`; a task YAML alone defines a
competition that needs no new code. This module is library code: no Hydra.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kohaku.config import ConfigError, build
from kohaku.prompts import check_template
from kohaku.retrieval.gold import GoldSpec
from kohaku.values import MODEL_BLANK_TOKENS

FORMATS = ("csv", "jsonl")
FIELD_TYPES = ("text", "number", "list", "choice", "refs")
ABSTENTION = ("allowed", "never")
ORDERS = ("context_first", "question_first")
REFERENCES = ("doc", "doc_page")
# Placeholders every answer prompt may use; a task adds its questions.fields.
BASE_PROMPT_FIELDS = ("context", "question", "qid")


@dataclass
class QuestionsSpec:
    format: str = "csv"               # csv | jsonl
    id: str = "id"                    # question id column (becomes qid)
    question: str = "question"        # question text column
    fields: list[str] = field(default_factory=lambda: ["answer_unit"])  # columns prompts may use

    def validate(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(f"task.questions.format={self.format!r}; use one of {', '.join(FORMATS)}")


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
    blank_values: list[str] = field(default_factory=lambda: list(MODEL_BLANK_TOKENS))
    blank_without_refs: bool = True   # a sample that cites no document is blank
    fallback: str = ""                # abstention=never: the answer written when no sample gave one

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

    @property
    def text_fields(self) -> list[str]:
        return [n for n, k in self.fields.items() if k != "refs"]


@dataclass
class VoteSpec:
    group: str = "wattbot"            # wattbot | amounts | text | name | package.module:function
    tolerance: float = 0.001          # relative tolerance of numbers (amounts)
    keep_surface: bool = False        # submit the winner as written (else its canonical form)


@dataclass
class SubmissionSpec:
    writer: str = "wattbot"           # wattbot (the competition's CSV) | columns | module:function
    # columns writer: output column -> source: qid, question, value, answer, explanation, refs,
    # ref_pages, agreement, any answer field or question column
    columns: dict[str, str] = field(default_factory=dict)
    list_format: str = "python"       # python ['a','b'] | json ["a","b"] | semicolon a;b
    blank: str = "is_blank"           # the cell of a field with no value

    def validate(self) -> None:
        if self.list_format not in ("python", "json", "semicolon"):
            raise ConfigError(f"task.submission.list_format={self.list_format!r}; use python, json or semicolon")
        if self.writer == "columns":
            if not self.columns:
                raise ConfigError("task.submission.writer=columns needs task.submission.columns "
                                  "(output column -> source)")
            if "qid" not in self.columns.values():
                raise ConfigError("task.submission.columns must write the question id (a column "
                                  "whose source is qid)")


@dataclass
class SolutionsSpec:
    format: str | None = None         # csv | jsonl; null: from the file's extension
    id: str = "id"
    answer: str = "answer_value"      # the gold answer column
    refs: str | None = "ref_id"       # gold document ids, or null

    def validate(self) -> None:
        if self.format is not None and self.format not in FORMATS:
            raise ConfigError(f"task.solutions.format={self.format!r}; use one of {', '.join(FORMATS)} or null")


LEVELS = ("question", "set")
COMBINE = ("mean", "sum")
ROUNDING = ("python", "half_up", "half_even")


@dataclass
class MetricSpec:
    name: str                         # component name (a column of the score table)
    fn: str                           # registered metric: exact_match, token_f1, numeric_match, llm_judge, ...
    weight: float = 1.0               # weight in the score (0: reported beside it)
    params: dict[str, Any] = field(default_factory=dict)   # the function's settings
    level: str = "question"           # question: one value per question; set: one value for all

    def validate(self) -> None:
        if self.level not in LEVELS:
            raise ConfigError(f"task.score.metrics[{self.name}].level={self.level!r}; use one of "
                              f"{', '.join(LEVELS)}")


@dataclass
class ScoreSpec:
    scorer: str = "wattbot"           # wattbot (score.variant picks the variant) | components
    metrics: list[dict[str, Any]] = field(default_factory=list)   # components scorer: MetricSpec each
    correct: str | None = None        # component whose value >= 0.5 makes a question correct (classes)
    classes: str = "wattbot"          # error classes: wattbot | generic | module:function
    # components scorer: how the competition combines per-question values (mean: each component
    # the mean over its questions; sum: the total of its points) and prints the figures
    combine: str = "mean"             # mean | sum
    round: int | None = None          # decimals of the printed score and components (None: as computed)
    rounding: str = "half_up"         # ties (.x5): half_up (decimal, as written) | half_even | python (round())

    @property
    def metric_specs(self) -> list[MetricSpec]:
        out = []
        for i, m in enumerate(self.metrics):
            out.append(build(MetricSpec, m, f"task.score.metrics[{i}]"))
        return out

    def validate(self) -> None:
        if self.combine not in COMBINE:
            raise ConfigError(f"task.score.combine={self.combine!r}; use one of {', '.join(COMBINE)}")
        if self.rounding not in ROUNDING:
            raise ConfigError(f"task.score.rounding={self.rounding!r}; use one of {', '.join(ROUNDING)}")
        if self.round is not None and (not isinstance(self.round, int) or self.round < 0):
            raise ConfigError(f"task.score.round={self.round!r}; give a number of decimals (>= 0) or null")
        if self.scorer == "components":
            specs = self.metric_specs
            if not specs:
                raise ConfigError("task.score.scorer=components needs task.score.metrics")
            names = [m.name for m in specs]
            if len(set(names)) != len(names):
                raise ConfigError(f"task.score.metrics: component names repeat: {names}")
            if self.correct is not None and self.correct not in names:
                raise ConfigError(f"task.score.correct={self.correct!r} is not a metric name ({', '.join(names)})")


@dataclass
class Task:
    name: str = "wattbot"
    questions: QuestionsSpec = field(default_factory=QuestionsSpec)
    answer: AnswerSpec = field(default_factory=AnswerSpec)
    vote: VoteSpec = field(default_factory=VoteSpec)
    references: str = "doc"           # doc | doc_page (the pages of the cited documents' blocks)
    submission: SubmissionSpec = field(default_factory=SubmissionSpec)
    solutions: SolutionsSpec = field(default_factory=SolutionsSpec)
    score: ScoreSpec = field(default_factory=ScoreSpec)
    gold: GoldSpec = field(default_factory=GoldSpec)

    def validate(self) -> None:
        self.answer.validate()
        if self.references not in REFERENCES:
            raise ConfigError(f"task.references={self.references!r}; use one of {', '.join(REFERENCES)}")
        allowed = (*BASE_PROMPT_FIELDS, *self.questions.fields)
        for order, pair in self.answer.prompts.items():
            for part, text in pair.items():
                check_template(text, allowed, f"task.answer.prompts.{order}.{part}")

    @property
    def prompt_fields(self) -> tuple[str, ...]:
        return (*BASE_PROMPT_FIELDS, *self.questions.fields)


def build_task(values: Any, where: str = "task") -> Task:
    """The Task from plain data (a composed config's ``task`` section or a loaded YAML); every
    part validated, errors naming the key."""
    return build(Task, values, where)
