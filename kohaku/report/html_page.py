"""The page of :mod:`kohaku.report.html`: its style sheet and its script (plain JavaScript, no
library, no network). The script reads the JSON blob ``#report-data`` and builds the page for
its ``kind`` (run, sweep, compare) with ``textContent`` only: no report text is ever parsed as
markup. When it is done it sets ``document.body.dataset.ready = "1"`` (the browser test waits
for it)."""

CSS = r"""
:root { --fg:#1d2330; --muted:#5c6577; --line:#d9dde5; --bg:#ffffff; --soft:#f4f6f9; --gold:#fff4cc;
        --goldline:#d9a400; --good:#2e8b57; --bad:#c0392b; --accent:#3a5fcd; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
header { padding: 14px 24px 8px; border-bottom: 1px solid var(--line); background: var(--soft); }
header h1 { font-size: 20px; margin: 0 0 4px; }
#subtitle { color: var(--muted); font-size: 12px; }
main { padding: 8px 24px 40px; max-width: 1400px; }
section { margin: 18px 0 26px; }
h2 { font-size: 17px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 14px 0 6px; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: var(--muted); }
.big { font-size: 34px; font-weight: 700; }
.cards { display: flex; gap: 18px; flex-wrap: wrap; align-items: flex-start; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; background: #fff; }
.bar { display: inline-block; height: 10px; background: var(--accent); border-radius: 2px; vertical-align: middle; }
.barcell { white-space: nowrap; }
.barcell .bar { margin-right: 6px; }
.cls { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px; color: #fff; white-space: nowrap; }
.mark { font-weight: 700; color: var(--accent); }
.fixed { color: var(--good); font-weight: 600; }
.broken { color: var(--bad); font-weight: 600; }
.controls { display: flex; gap: 10px; align-items: center; margin: 8px 0; flex-wrap: wrap; }
.controls input { padding: 4px 8px; min-width: 280px; }
#qtable tbody tr.q { cursor: pointer; }
#qtable tbody tr.q:hover { background: #eef2fb; }
#qtable tbody tr.open { background: #e6ecfa; }
tr.detail > td { background: #fafbfd; padding: 8px 14px 14px; }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 4px 0 8px; }
.kv .k { color: var(--muted); }
.block { border: 1px solid var(--line); border-left: 4px solid var(--line); border-radius: 4px; margin: 6px 0;
         padding: 4px 8px; background: #fff; }
.block.gold { border-left-color: var(--goldline); background: var(--gold); }
.block .doc { font-size: 12px; color: var(--muted); }
.block .badge { font-size: 11px; background: var(--goldline); color: #fff; border-radius: 6px; padding: 0 5px;
                margin-left: 6px; }
.block pre, pre.text { white-space: pre-wrap; word-break: break-word; margin: 2px 0; font: 12.5px/1.4 ui-monospace,
                       SFMono-Regular, Menlo, Consolas, monospace; }
.agree { color: var(--good); } .disagree { color: var(--bad); }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.flip { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; margin: 10px 0; }
.flip h3 { margin-top: 0; }
details > summary { cursor: pointer; color: var(--accent); margin: 4px 0; }
figure.card { margin: 0; }
img.plot { max-width: 560px; width: 100%; border: 1px solid var(--line); border-radius: 4px; }
.notes li { color: var(--muted); }
.err { color: var(--bad); font-weight: 600; }
.pg { display: inline-block; font: 12px/1.3 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; border-radius: 4px;
      padding: 0 4px; margin: 1px 3px 1px 0; border: 1px solid var(--line); overflow-wrap: anywhere; }
.pg.hit { background: #e3f4ea; border-color: var(--good); color: #1e5e3a; }
.pg.miss { background: #fbe9e7; border-color: var(--bad); color: #8e2a1f; }
.pg.gold { background: var(--gold); border-color: var(--goldline); }
.pg.gold.miss { background: #fff; border-style: dashed; color: var(--muted); }
.pages .lab { color: var(--muted); font-size: 11px; margin-right: 3px; }
#qtable td { overflow-wrap: anywhere; }
#qtable td:nth-child(1), #qtable td:nth-child(3), #qtable td:nth-child(4) { white-space: nowrap; overflow-wrap: normal; }
#qtable td.pages-cell { min-width: 260px; }
.card { max-width: 100%; overflow-x: auto; }
"""

JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var BLOCKS = D.blocks || [];
  var PALETTE = ["#c0392b", "#d35400", "#8e44ad", "#2c3e50", "#16a085", "#7f8c8d", "#b7950b", "#1f618d",
                 "#a04000", "#6c3483", "#117a65", "#784212"];

  function el(tag, attrs) {
    var e = document.createElement(tag);
    attrs = attrs || {};
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined) return;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = String(v);
      else if (k.slice(0, 2) === "on") e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, String(v));
    });
    for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
    return e;
  }
  function add(parent, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { add(parent, c); }); return; }
    if (typeof child === "string" || typeof child === "number") child = document.createTextNode(String(child));
    parent.appendChild(child);
  }
  function isNum(x) { return typeof x === "number" && isFinite(x); }
  function f4(x) { return isNum(x) ? x.toFixed(4) : "–"; }
  function s4(x) { return isNum(x) ? (x >= 0 ? "+" : "") + x.toFixed(4) : "–"; }
  function cnt(x) { return isNum(x) ? (Number.isInteger(x) ? String(x) : x.toFixed(1)) : "–"; }
  function show(x) { return x === null || x === undefined || x === "" ? "–" : String(x); }
  function classColor(name) {
    var bare = String(name).replace(/^pages:/, "");   // the good classes in green, values and pages alike
    if (bare === "correct" || bare === "all_pools" || bare === "none_needed") return "#2e8b57";
    var h = 0;
    for (var i = 0; i < String(name).length; i++) h = (h * 31 + String(name).charCodeAt(i)) >>> 0;
    return PALETTE[h % PALETTE.length];
  }
  function classTag(name) {
    if (!name) return el("span", {class: "muted", text: "–"});
    return el("span", {class: "cls", style: "background:" + classColor(name), "data-class": name, text: name});
  }
  function bar(value, max, color, width) {
    var full = width || 120;   // never wider than its slot, whatever the scale
    var w = max > 0 && isNum(value) ? Math.min(full, Math.max(value > 0 ? 2 : 0, Math.round(full * value / max))) : 0;
    return el("span", {class: "bar", style: "width:" + w + "px" + (color ? ";background:" + color : "")});
  }
  function section(id, title) {
    var s = el("section", {id: id}, el("h2", {text: title}));
    for (var i = 2; i < arguments.length; i++) add(s, arguments[i]);
    return s;
  }
  function table(head, rows, attrs) {
    var t = el("table", attrs || {});
    t.appendChild(el("thead", {}, el("tr", {}, head.map(function (h) {
      return typeof h === "string" ? el("th", {text: h}) : el("th", {class: h.cls, text: h.text});
    }))));
    var body = el("tbody");
    rows.forEach(function (r) { body.appendChild(r); });
    t.appendChild(body);
    return t;
  }
  function td(x, cls) { return el("td", {class: cls || null}, x); }
  function notes() {
    if (!D.notes || !D.notes.length) return null;
    return section("notes", "Notes", el("ul", {class: "notes"}, D.notes.map(function (n) { return el("li", {text: n}); })));
  }

  // --- one question: truth, answers, samples, contexts -------------------------------------
  function refs(list) { return list && list.length ? list.join(", ") : "–"; }
  // a typed question's cited pages (each marked: in a gold pool or not) and its gold pools
  // (each marked: hit by a cited page or not), with the page class
  function pagesView(P, withClass) {
    if (!P) return el("span", {class: "muted", text: "–"});
    var cited = P.cited.length ? P.cited.map(function (c) {
      return el("span", {class: "pg " + (c[1] ? "hit" : "miss"), title: c[1] ? "in a gold pool" : "in no gold pool",
        text: (c[1] ? "✓ " : "✗ ") + c[0]});
    }) : [el("span", {class: "muted", text: "none"})];
    var pools = P.pools.length ? P.pools.map(function (g) {
      return el("span", {class: "pg gold" + (g[1] ? "" : " miss"), title: g[1] ? "pool hit" : "pool not cited",
        text: (g[1] ? "✓ " : "○ ") + g[0]});
    }) : [el("span", {class: "muted", text: "none"})];
    return el("div", {class: "pages", "data-page-class": P["class"] || ""},
      withClass ? el("div", {}, classTag(P["class"]), " ", el("span", {class: "muted", text: P.detail || ""})) : null,
      el("div", {class: "cited"}, el("span", {class: "lab", text: "cited"}), cited),
      el("div", {class: "gold-pools"}, el("span", {class: "lab", text: "gold"}), pools));
  }
  function contextView(ctx, closed) {
    if (!ctx || !ctx.length) return el("p", {class: "muted", text: "No context recorded (the retrieve artifact is gone, or the question was not asked)."});
    return ctx.map(function (c) {
      var gold = c.blocks.filter(function (b) { return b[2]; }).length;
      return el("details", {class: "context", open: ctx.length === 1 && !closed ? "" : null},
        el("summary", {text: "Context of attempt " + show(c.attempt) + ": " + c.blocks.length + " blocks, " +
          show(c.n_tokens) + " tokens (budget " + show(c.budget) + "), " + gold + " from a gold document"}),
        c.blocks.map(function (b) {
          return el("div", {class: "block" + (b[2] ? " gold" : ""), "data-doc": b[1] || ""},
            el("div", {class: "doc"}, show(b[1]), b[2] ? el("span", {class: "badge", text: "gold"}) : null),
            el("pre", {text: BLOCKS[b[0]] === undefined ? "" : BLOCKS[b[0]]}));
        }));
    });
  }
  function samplesView(side) {
    if (!side.samples || !side.samples.length) return el("p", {class: "muted", text: "No samples recorded."});
    var rows = side.samples.map(function (s) {
      var fields = Object.keys(s.fields || {}).map(function (k) { return k + ": " + show(s.fields[k]); }).join("\n");
      return el("tr", {class: "sample"},
        td(show(s.attempt), "num"), td(show(s.idx), "num"),
        td(el("span", {class: s.agrees ? "agree" : "disagree", text: s.agrees ? "✓ agrees" : "✗ differs"})),
        td(s.blank ? "(blank)" : show(s.value)), td(refs(s.refs)),
        td(s.valid === false ? el("span", {class: "err", text: "invalid"}) : "ok"),
        td(el("pre", {class: "text", text: s.raw ? "raw: " + s.raw : fields})));
    });
    return table(["attempt", "sample", "vote", "value", "refs", "output", "fields"], rows, {class: "samples"});
  }
  function answerKv(side) {
    return el("div", {class: "kv"},
      el("span", {class: "k", text: "voted answer"}), el("span", {class: "voted", text: show(side.voted)}),
      el("span", {class: "k", text: "voted refs"}), el("span", {text: refs(side.voted_refs)}),
      el("span", {class: "k", text: "agreement"}),
      el("span", {class: "agreement", text: isNum(side.agreement) ? (100 * side.agreement).toFixed(0) + " % of " +
        show(side.n_votes) + " votes (" + show(side.n_blank) + " blank)" : "–"}));
  }
  function questionDetail(q) {
    return el("div", {class: "qdetail"},
      el("div", {class: "kv"},
        el("span", {class: "k", text: "question"}), el("span", {text: show(q.question)}),
        el("span", {class: "k", text: "truth"}), el("span", {class: "truth", text: show(q.truth)}),
        el("span", {class: "k", text: "truth refs (gold)"}), el("span", {text: show(q.truth_ref)}),
        el("span", {class: "k", text: "submitted"}), el("span", {text: show(q.pred)}),
        el("span", {class: "k", text: "submitted refs"}), el("span", {text: show(q.pred_ref)}),
        el("span", {class: "k", text: "class"}), el("span", {}, classTag(q["class"]), " ", q.detail || ""),
        q.pages ? [el("span", {class: "k", text: "pages"}), pagesView(q.pages, true)] : null,
        el("span", {class: "k", text: "evidence"}), el("span", {text: (q.evidence || []).join(", ") || "–"})),
      answerKv(q), el("h3", {text: "Samples"}), samplesView(q),
      el("h3", {text: "What the model saw"}), contextView(q.contexts));
  }

  // --- run --------------------------------------------------------------------------------
  function runPage(R) {
    var app = document.getElementById("app");
    document.getElementById("subtitle").textContent = "task " + show(R.task) + " · metric " + show(R.metric) +
      " · " + show(R.n) + " questions · generated " + D.generated;
    var iv = R.interval;
    var comps = R.components || [];
    // bars on one scale that fits the card: 1 for a mean, the question count for a summed score,
    // or the largest component when that is larger
    var cmax = Math.max.apply(null, [R.combine === "sum" && isNum(R.n) ? R.n : 1].concat(
      comps.map(function (c) { return isNum(c.value) ? Math.abs(c.value) : 0; })));
    add(app, section("score", "Score",
      el("div", {class: "cards"},
        el("div", {class: "card"}, el("div", {class: "big", id: "score-value", text: f4(R.score)}),
          el("div", {id: "score-interval", text: iv ? "95 % interval [" + f4(iv.lo) + ", " + f4(iv.hi) + "]" : "no interval"}),
          el("div", {class: "muted", text: iv ? "bootstrap over " + iv.n + " questions, " + iv.resamples + " resamples" : ""})),
        el("div", {class: "card"}, table(["component", {cls: "num", text: "weight"}, {cls: "num", text: "value"}, ""],
          comps.map(function (c) {
            return el("tr", {class: "component"}, td(c.name), td(isNum(c.weight) ? String(c.weight) : "–", "num"),
              td(f4(c.value), "num"), td(bar(c.value, cmax)));
          }), {id: "components"})),
        el("div", {class: "card"}, el("div", {class: "kv"},
          el("span", {class: "k", text: "run"}), el("span", {text: show(R.id)}),
          el("span", {class: "k", text: "status"}), el("span", {text: show(R.status)}),
          el("span", {class: "k", text: "overrides"}), el("span", {text: (R.overrides || []).join(" ") || "(none)"}),
          el("span", {class: "k", text: "missing / extra"}), el("span", {text: show(R.n_missing) + " / " + show(R.n_extra)}),
          el("span", {class: "k", text: "seconds"}), el("span", {text: isNum(R.seconds) ? R.seconds.toFixed(1) : "–"}))))));
    var E = R.errors || {};
    var counts = E.counts || {};
    var cols = [["all", counts]];
    Object.keys(E.by_kind || {}).forEach(function (k) { cols.push(["kind: " + k, E.by_kind[k]]); });
    Object.keys(E.by_evidence || {}).forEach(function (k) { cols.push(["evidence: " + k, E.by_evidence[k]]); });
    cols = cols.filter(function (c, i) {  // a kind or evidence type no question has: no column
      return i === 0 || Object.keys(c[1]).some(function (k) { return c[1][k]; });
    });
    var listed = (R.classes && R.classes.length) ? R.classes : Object.keys(counts);
    var classes = listed.filter(function (k) { return counts[k]; });
    var kindKeys = {};   // with kinds: only the classes some kind here can take
    Object.keys(E.by_kind || {}).forEach(function (k) { Object.keys(E.by_kind[k]).forEach(function (c) { kindKeys[c] = 1; }); });
    var empty = listed.filter(function (k) { return !counts[k] && (!Object.keys(kindKeys).length || kindKeys[k]); });
    var maxes = cols.map(function (c) {
      return Math.max.apply(null, [0].concat(classes.map(function (k) { return c[1][k] || 0; })));
    });
    var rows = classes.map(function (k) {
      var details = E.details && E.details[k] ? Object.keys(E.details[k]).map(function (d) { return d + ": " + E.details[k][d]; }).join(", ") : "";
      return el("tr", {class: "class-row", "data-class": k},
        td(el("a", {href: "#questions", onclick: function () { setFilter(k); }}, classTag(k))),
        cols.map(function (c, i) {
          var v = c[1][k] || 0;
          return el("td", {class: "barcell num", "data-col": c[0]}, bar(v, maxes[i], classColor(k), 60), String(v));
        }), td(details, "muted"));
    });
    var totals = el("tr", {class: "muted"}, td("(questions)"), cols.map(function (c) {
      var s = 0; classes.forEach(function (k) { s += c[1][k] || 0; });
      return td(String(s), "num");
    }), td(""));
    rows.push(totals);
    add(app, section("classes", "Error classes",
      el("p", {class: "muted", text: "Every question in one class; columns split by the answer kind (the task's own kinds where it " +
        "declares them, else the truth's) and the question's evidence type (evidence flags overlap). Click a class to list its questions." +
        (empty.length ? " No question in: " + empty.join(", ") + "." : "")}),
      table(["class"].concat(cols.map(function (c) { return {cls: "num", text: c[0]}; })).concat(["detail"]), rows, {id: "class-table"})));
    var PG = E.pages;
    if (PG && PG.counts) {
      var pcols = [["all", PG.counts]];
      Object.keys(PG.by_kind || {}).forEach(function (k) { pcols.push(["kind: " + k, PG.by_kind[k]]); });
      pcols = pcols.filter(function (c, i) { return i === 0 || Object.keys(c[1]).some(function (k) { return c[1][k]; }); });
      var pnames = Object.keys(PG.counts).filter(function (k) { return PG.counts[k]; });
      var pmax = Math.max.apply(null, [0].concat(pnames.map(function (k) { return PG.counts[k]; })));
      add(app, section("pages", "Cited pages",
        el("p", {class: "muted", text: "Beside the value class: the cited pages against the gold pools (all_pools: every pool " +
          "hit, nothing else; extra_pages: every pool hit plus pages outside them; some_pools; no_pools; none_needed: no pool, " +
          "nothing cited). Click one to list its questions."}),
        table(["pages"].concat(pcols.map(function (c) { return {cls: "num", text: c[0]}; })), pnames.map(function (k) {
          return el("tr", {class: "page-row", "data-page-class": k},
            td(el("a", {href: "#questions", onclick: function () { setPageFilter(k); }}, classTag(k))),
            pcols.map(function (c) {
              var v = c[1][k] || 0;
              return el("td", {class: "barcell num", "data-col": c[0]}, bar(v, pmax, classColor(k), 60), String(v));
            }));
        }), {id: "page-table"})));
    }

    var Q = R.questions || [];
    var select = el("select", {id: "class-filter"}, el("option", {value: "", text: "all classes (" + Q.length + ")"}),
      classes.filter(function (k) { return counts[k]; }).map(function (k) {
        return el("option", {value: k, text: k + " (" + counts[k] + ")"});
      }));
    var unscored = Q.filter(function (q) { return !q.scored; }).length;
    if (unscored) add(select, el("option", {value: "-", text: "not scored (" + unscored + ")"}));
    var hasPages = Q.some(function (q) { return q.pages; });
    var pageSelect = hasPages ? el("select", {id: "page-filter"}, el("option", {value: "", text: "all cited pages"}),
      Object.keys((E.pages || {}).counts || {}).filter(function (k) { return E.pages.counts[k]; }).map(function (k) {
        return el("option", {value: k, text: "pages: " + k + " (" + E.pages.counts[k] + ")"});
      })) : null;
    var search = el("input", {id: "search", type: "search", placeholder: "search question, id, truth or answer"});
    var shown = el("span", {id: "shown", class: "muted"});
    var body = el("tbody");
    var items = Q.map(function (q) {
      var row = el("tr", {class: "q", "data-qid": q.qid, "data-class": q["class"] || ""},
        td(q.qid), td(show(q.question)), td(show(q.kind)), td(q.scored ? classTag(q["class"]) : el("span", {class: "muted", text: "not scored"})),
        td(show(q.truth)), td(show(q.pred)), hasPages ? td(pagesView(q.pages, true), "pages-cell") : null,
        td(isNum(q.agreement) ? (100 * q.agreement).toFixed(0) + " %" : "–", "num"));
      var hay = [q.qid, q.question, q.truth, q.pred, q.voted].join(" ").toLowerCase();
      var item = {q: q, row: row, detail: null, hay: hay};
      row.addEventListener("click", function () { toggle(item); });
      body.appendChild(row);
      return item;
    });
    function toggle(item) {
      if (item.detail) {
        item.detail.parentNode.removeChild(item.detail); item.detail = null; item.row.classList.remove("open"); return;
      }
      item.detail = el("tr", {class: "detail", "data-qid": item.q.qid}, el("td", {colspan: hasPages ? 8 : 7}, questionDetail(item.q)));
      item.row.parentNode.insertBefore(item.detail, item.row.nextSibling);
      item.row.classList.add("open");
    }
    function apply() {
      var cls = select.value, words = search.value.toLowerCase().split(/\s+/).filter(Boolean), n = 0;
      var pcls = pageSelect ? pageSelect.value : "";
      items.forEach(function (it) {
        var ok = (!cls || it.q["class"] === cls || (cls === "-" && !it.q.scored)) && words.every(function (w) { return it.hay.indexOf(w) >= 0; }) &&
          (!pcls || (it.q.pages && it.q.pages["class"] === pcls));
        it.row.style.display = ok ? "" : "none";
        if (it.detail) it.detail.style.display = ok ? "" : "none";
        if (ok) n++;
      });
      shown.textContent = n + " of " + items.length + " questions";
    }
    function setFilter(k) { select.value = k; apply(); }
    function setPageFilter(k) { if (pageSelect) { pageSelect.value = k; apply(); } }
    if (pageSelect) pageSelect.addEventListener("change", apply);
    select.addEventListener("change", apply);
    search.addEventListener("input", apply);
    add(app, section("questions", "Questions",
      el("div", {class: "controls"}, select, pageSelect, search, shown),
      el("p", {class: "muted", text: "Click a question for its truth, the voted answer, every sample and the context " +
        "the model saw (blocks of the gold documents marked)."}),
      (function () { var t = table(["id", "question", "kind", "class", "truth", "submitted"].concat(hasPages ? ["cited pages vs gold"] : [])
          .concat([{cls: "num", text: "agreement"}]), [], {id: "qtable"});
        t.replaceChild(body, t.tBodies[0]); return t; })()));
    apply();
  }

  // --- a flipped question, both sides -------------------------------------------------------
  function sideView(s) {
    return el("div", {class: "side"},
      el("h3", {}, show(s.name), " ", classTag(s["class"])),
      el("div", {class: "kv"},
        el("span", {class: "k", text: "answer"}), el("span", {class: "answer", text: show(s.answer)}),
        el("span", {class: "k", text: "refs"}), el("span", {text: show(s.ref)}),
        s.pages ? [el("span", {class: "k", text: "pages"}), pagesView(s.pages, true)] : null,
        el("span", {class: "k", text: "agreement"}),
        el("span", {text: isNum(s.agreement) ? (100 * s.agreement).toFixed(0) + " % of " + show(s.n_votes) + " votes" : "–"})),
      s.samples ? el("details", {}, el("summary", {text: "samples (" + s.samples.length + ")"}), samplesView(s)) : null,
      s.contexts ? contextView(s.contexts, true) : el("p", {class: "muted", text: "no run dir: no context"}));
  }
  function flipsView(F, id) {
    var box = el("div", {id: id, class: "flips"});
    if (!F) { add(box, el("p", {class: "muted", text: "No comparison (fewer than two comparable points)."})); return box; }
    add(box, el("p", {}, el("b", {text: show(F.b)}), " against ", el("b", {text: show(F.a)}), ": ",
      el("span", {class: "fixed", text: show(F.fixed) + " fixed"}), ", ",
      el("span", {class: "broken", text: show(F.broken) + " broken"}),
      F.rows.length < F.n_flips ? " (first " + F.rows.length + " of " + F.n_flips + " shown)" : ""));
    if (!F.rows.length) add(box, el("p", {class: "muted", text: "No question changed."}));
    F.rows.forEach(function (r) {
      add(box, el("div", {class: "flip", "data-qid": r.qid, "data-change": r.change},
        el("h3", {}, el("span", {class: r.change, text: r.change}), " " + r.qid + " (" + s4(r.delta) + ") ",
          r.kind ? el("span", {class: "muted", text: "[" + r.kind + "] "}) : null, show(r.question)),
        el("div", {class: "kv"}, el("span", {class: "k", text: "truth"}), el("span", {class: "truth", text: show(r.truth)}),
          el("span", {class: "k", text: "truth refs (gold)"}), el("span", {text: show(r.truth_ref)})),
        el("div", {class: "pair"}, sideView(r.a), sideView(r.b))));
    });
    return box;
  }
  function isPage(k) { return String(k).slice(0, 6) === "pages:"; }
  // the error classes per point (or run), the page classes in a table of their own, and the
  // split by answer kind (rows: point · kind) where the report has it
  function classTables(all, rows, kinds, prefix) {
    var out = [classTable(all.filter(function (k) { return !isPage(k); }), rows, prefix + "class-table")];
    var pages = all.filter(isPage);
    if (pages.some(function (k) { return rows.some(function (r) { return r.counts[k]; }); })) {
      out.push(el("h3", {text: "Cited pages against the gold pools"}), classTable(pages, rows, prefix + "page-table"));
    }
    if (kinds && kinds.length) {
      var names = [];
      kinds.forEach(function (r) { Object.keys(r.counts).forEach(function (k) { if (names.indexOf(k) < 0) names.push(k); }); });
      out.push(el("h3", {text: "By answer kind"}), el("p", {class: "muted", text: "The same classes split by each question's " +
        "answer kind (the task's kinds)."}),
        classTable(names.filter(function (k) { return !isPage(k); }), kinds, prefix + "kind-table"));
      if (names.some(isPage)) {
        out.push(el("h3", {text: "Cited pages by answer kind"}), classTable(names.filter(isPage), kinds, prefix + "kind-page-table"));
      }
    }
    return out;
  }
  function classTable(all, rows, id) {
    var names = all.filter(function (k) { return rows.some(function (r) { return r.counts[k]; }); });
    var pagesOnly = names.length && names.every(isPage);   // under a "cited pages" heading: the class alone
    var max = 0;
    rows.forEach(function (r) { names.forEach(function (k) { if (isNum(r.counts[k])) max = Math.max(max, r.counts[k]); }); });
    return table(["point"].concat(names.map(function (k) { return {cls: "num", text: pagesOnly ? k.slice(6) : k}; })), rows.map(function (r) {
      return el("tr", {class: "point-row"}, td(r.label), names.map(function (k) {
        return el("td", {class: "barcell num", "data-class": k}, bar(r.counts[k], max, classColor(k), 40), cnt(r.counts[k]));
      }));
    }), {id: id});
  }

  // --- sweep ------------------------------------------------------------------------------
  function sweepPage(S) {
    var app = document.getElementById("app");
    document.getElementById("subtitle").textContent = "swept " + (S.keys.join(", ") || "(nothing)") + " · metric " +
      show(S.metric) + " · " + show(S.n) + " questions · generated " + D.generated;
    var base = S.baseline ? Object.keys(S.baseline).map(function (k) { return k + "=" + S.baseline[k]; }).join(", ") : null;
    var head = ["#", "run"].concat(S.keys).concat([{cls: "num", text: "score"}, "point's 95 % interval"])
      .concat(S.components.map(function (c) { return {cls: "num", text: c}; }))
      .concat([{cls: "num", text: "delta"}, "delta 95 %", {cls: "num", text: "p_holm"}, "mark", "status"]);
    var rows = S.board.map(function (r, i) {
      var isBase = !!S.baseline && Object.keys(S.baseline).every(function (k) { return String(r.keys[k]) === String(S.baseline[k]); });
      return el("tr", {class: "board-row", "data-run": r.run_id},
        td(String(i + 1), "num"), td(show(r.run_id)), S.keys.map(function (k) { return td(show(r.keys[k])); }),
        td(f4(r.score), "num score"),
        td(isNum(r.cell_lo) ? "[" + f4(r.cell_lo) + ", " + f4(r.cell_hi) + "]" : "–"),
        S.components.map(function (c) { return td(f4(r.components[c]), "num"); }),
        td(s4(r.delta), "num"), td(isNum(r.delta_lo) ? "[" + s4(r.delta_lo) + ", " + s4(r.delta_hi) + "]" : "–"),
        td(isNum(r.p_holm) ? r.p_holm.toFixed(4) : "–", "num"),
        td(el("span", {class: "mark", text: r.sig === "*" ? "*" : (isBase ? "baseline" : "")})),
        td(r.error ? el("span", {class: "err", text: r.status + ": " + r.error}) : show(r.status)));
    });
    add(app, section("leaderboard", "Leaderboard",
      el("p", {class: "muted", text: (base ? "Baseline: " + base + ". " : "") + "delta = run − baseline point on the same questions; " +
        "interval: paired bootstrap 95 % over questions (" + show(S.resamples) + " resamples); * = the interval excludes zero."}),
      table(head, rows, {id: "board"})));
    if (S.cells && S.cells.length) {
      add(app, section("points", "Points against the baseline", table(
        S.keys.concat([{cls: "num", text: "runs"}, {cls: "num", text: "score"}, "95 %", {cls: "num", text: "delta"}, "delta 95 %",
          {cls: "num", text: "p_holm"}, "mark", {cls: "num", text: "fixed"}, {cls: "num", text: "broken"}]),
        S.cells.map(function (c) {
          return el("tr", {class: "cell-row"}, S.keys.map(function (k) { return td(show(c[k])); }),
            td(show(c.n_runs), "num"), td(f4(c.score), "num"), td("[" + f4(c.score_lo) + ", " + f4(c.score_hi) + "]"),
            td(c.sig === "baseline" ? "baseline" : s4(c.delta), "num"),
            td(isNum(c.delta_lo) ? "[" + s4(c.delta_lo) + ", " + s4(c.delta_hi) + "]" : "–"),
            td(isNum(c.p_holm) ? c.p_holm.toFixed(4) : "–", "num"), td(el("span", {class: "mark", text: c.sig === "*" ? "*" : ""})),
            td(show(c.fixed), "num"), td(show(c.broken), "num"));
        }), {id: "cells"})));
    }
    if (S.plots && S.plots.length) {
      add(app, section("plots", "Plots", el("div", {class: "cards"}, S.plots.map(function (p) {
        return el("figure", {class: "card"}, el("img", {class: "plot", src: p.src, alt: p.name}),
          el("figcaption", {class: "muted", text: p.name}));
      }))));
    }
    if (S.classes && S.classes.length) {
      add(app, section("classes", "Error classes per point", el("p", {class: "muted", text: "Questions per class, mean over the point's runs."}),
        classTables(S.classes, S.cells.map(function (c) {
          return {label: S.keys.map(function (k) { return k + "=" + c[k]; }).join(", ") || "all", counts: c};
        }), S.kinds, "")));
    }
    add(app, section("flips", "Flipped questions: the best point against the baseline", flipsView(S.flips, "flip-list")));
  }

  // --- comparison ---------------------------------------------------------------------------
  function comparePage(C) {
    var app = document.getElementById("app");
    var level = Math.round(100 * C.level);
    document.getElementById("subtitle").textContent = "metric " + show(C.metric) + " · " + show(C.resamples) +
      " paired resamples · generated " + D.generated;
    add(app, section("pairs", "Pairs", el("p", {class: "muted", text: "delta = B − A; " + level +
      " % paired bootstrap interval over questions; p_holm: Holm-adjusted over the pairs; * = the interval excludes zero."}),
      table(["A", "B", {cls: "num", text: "n"}, {cls: "num", text: "delta"}, level + " % interval", {cls: "num", text: "p"},
        {cls: "num", text: "p_holm"}, {cls: "num", text: "mde80"}, {cls: "num", text: "fixed"}, {cls: "num", text: "broken"}, "mark"],
        C.pairs.map(function (p) {
          return el("tr", {class: "pair-row"}, td(p.a), td(p.b), td(String(p.n), "num"), td(s4(p.delta), "num"),
            td("[" + s4(p.lo) + ", " + s4(p.hi) + "]"), td(isNum(p.p) ? p.p.toFixed(4) : "–", "num"),
            td(isNum(p.p_holm) ? p.p_holm.toFixed(4) : "–", "num"), td(f4(p.mde), "num"),
            td(String(p.fixed), "num fixed"), td(String(p.broken), "num broken"), td(el("span", {class: "mark", text: p.sig ? "*" : ""})));
        }), {id: "pairs-table"})));
    add(app, section("intervals", "Scores", table(["run", {cls: "num", text: "score"}, level + " % interval", {cls: "num", text: "seeds"},
      {cls: "num", text: "seed sd"}].concat(C.components.map(function (c) { return {cls: "num", text: c}; })),
      C.intervals.map(function (it) {
        return el("tr", {}, td(it.name), td(f4(it.score), "num"), td("[" + f4(it.lo) + ", " + f4(it.hi) + "]"),
          td(String(it.n_seeds), "num"), td(f4(it.seed_sd), "num"),
          C.components.map(function (c) { return td(f4(it.components[c]), "num"); }));
      }), {id: "intervals-table"})));
    var names = [];
    Object.keys(C.errors || {}).forEach(function (n) { Object.keys(C.errors[n]).forEach(function (k) { if (names.indexOf(k) < 0) names.push(k); }); });
    if (names.length) {
      add(app, section("classes", "Error classes", classTables(names, Object.keys(C.errors).map(function (n) {
        return {label: n, counts: C.errors[n]};
      }), C.kinds, "")));
    }
    var box = section("flips", "Flipped questions");
    C.flips.forEach(function (F, i) { add(box, [el("h3", {text: F.label}), flipsView(F, "flip-list-" + i)]); });
    add(app, box);
  }

  try {
    if (D.kind === "run") runPage(D.run);
    else if (D.kind === "sweep") sweepPage(D.sweep);
    else if (D.kind === "compare") comparePage(D.compare);
    else throw new Error("unknown report kind " + D.kind);
    add(document.getElementById("app"), notes());
    document.body.dataset.ready = "1";
  } catch (e) {
    add(document.getElementById("app"), el("p", {class: "err", text: "This report could not be drawn: " + e}));
    throw e;
  }
})();
"""
