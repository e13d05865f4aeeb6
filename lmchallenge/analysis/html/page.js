// lmc pretty / lmc diff page: builds the view from the JSON in #lmc-data (no network, no libraries).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("lmc-data").textContent);
  var tokens = [];

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    }
    if (text !== undefined && text !== null) { node.textContent = text; }
    return node;
  }

  function renderSummary() {
    var names = Object.keys(data.summary);
    var root = document.getElementById("summary");
    if (!names.length) { return; }
    var keys = [];
    names.forEach(function (n) {
      Object.keys(data.summary[n]).forEach(function (k) { if (keys.indexOf(k) < 0) { keys.push(k); } });
    });
    var table = el("table", {"class": "stats", "id": "stats"});
    var head = el("tr");
    head.appendChild(el("th", null, "statistic"));
    names.forEach(function (n) { head.appendChild(el("th", null, n)); });
    head.appendChild(el("th", null, "unit"));
    table.appendChild(head);
    keys.forEach(function (k) {
      var row = el("tr", {"data-stat": k});
      row.appendChild(el("th", null, k));
      names.forEach(function (n) {
        var v = data.summary[n][k];
        row.appendChild(el("td", {"class": "num"}, v === undefined ? "" : v));
      });
      row.appendChild(el("td", {"class": "unit"}, (data.units || {})[k] || ""));
      table.appendChild(row);
    });
    root.appendChild(table);
  }

  function renderLegend() {
    var root = document.getElementById("legend");
    data.legend.forEach(function (entry) {
      var li = el("li");
      var sample = el("span", {"class": entry[0]}, "abc");
      li.appendChild(sample);
      li.appendChild(document.createTextNode(" " + entry[1]));
      root.appendChild(li);
    });
  }

  function renderTable(spec) {
    var table = el("table");
    if (spec.caption) { table.appendChild(el("caption", null, spec.caption)); }
    var head = el("tr");
    spec.head.forEach(function (h) { head.appendChild(el("th", null, h)); });
    table.appendChild(head);
    spec.rows.forEach(function (cells, i) {
      var row = el("tr");
      var mark = spec.marks && spec.marks[String(i)];
      if (mark) { row.className = mark; }
      cells.forEach(function (c) { row.appendChild(el("td", null, c)); });
      table.appendChild(row);
    });
    return table;
  }

  function showDetail(index) {
    var tok = tokens[index];
    if (!tok) { return; }
    var previous = document.querySelector(".tok.current");
    if (previous) { previous.classList.remove("current"); }
    tok.node.classList.add("current");
    var root = document.getElementById("detail");
    root.textContent = "";
    root.setAttribute("data-token", String(index));
    root.appendChild(el("h2", null, "token " + index));
    var rows = el("table", {"class": "fields"});
    tok.spec.d.rows.forEach(function (r) {
      var row = el("tr");
      row.appendChild(el("th", null, r[0]));
      row.appendChild(el("td", null, r[1]));
      rows.appendChild(row);
    });
    root.appendChild(rows);
    tok.spec.d.tables.forEach(function (t) { root.appendChild(renderTable(t)); });
  }

  function renderText() {
    var root = document.getElementById("text");
    data.lines.forEach(function (line) {
      var div = el("div", {"class": "line"});
      div.appendChild(el("span", {"class": "label"}, line.label));
      var words = el("span", {"class": "words"});
      line.tokens.forEach(function (t) {
        if (t.sp) { words.appendChild(document.createTextNode(" ")); }
        var span = el("span", {"class": "tok" + (t.sel ? "" : " unsel"), "data-i": String(t.i),
                               "title": t.tip, "tabindex": "0"});
        t.s.forEach(function (seg) { span.appendChild(el("span", {"class": seg[1]}, seg[0])); });
        span.addEventListener("click", function () { showDetail(t.i); });
        span.addEventListener("keydown", function (e) {
          if (e.key === "Enter" || e.key === " ") { e.preventDefault(); showDetail(t.i); }
        });
        tokens[t.i] = {node: span, spec: t};
        words.appendChild(span);
      });
      div.appendChild(words);
      root.appendChild(div);
    });
  }

  function fromHash() {
    var m = /^#token=(\d+)$/.exec(window.location.hash);
    if (m) {
      var index = parseInt(m[1], 10);
      if (tokens[index]) {
        tokens[index].node.click();
        tokens[index].node.scrollIntoView({block: "center"});
      }
    }
  }

  document.getElementById("note").textContent = data.note || "";
  renderSummary();
  renderLegend();
  renderText();
  window.addEventListener("hashchange", fromHash);
  fromHash();
  document.body.setAttribute("data-rendered", String(tokens.length));
}());
