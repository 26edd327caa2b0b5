/* Retasc Dash: the queue and the board. Keyboard shortcuts, row selection for bulk
 * changes, and keeping both across live refreshes (htmx swaps #queue-live / #board-live
 * when a `retasc:live` event arrives; the cursor, the checked rows and the open closed
 * columns are put back by identifier after each swap).
 *
 * Keys (ignored while typing in a field): j / k move, Enter or o opens, x selects,
 * / focuses search, b switches table <-> board, c new issue, ? shows help, Esc closes.
 */
(function () {
  "use strict";
  var cursor = null;      // identifier of the highlighted issue
  var checked = {};       // identifier -> true, for the bulk form
  var openColumns = {};   // closed board columns the person opened

  function items() {
    return Array.prototype.slice.call(document.querySelectorAll("#queue-table tbody tr[data-issue], #board .bcard[data-issue]"));
  }
  function boxes() {
    return Array.prototype.slice.call(document.querySelectorAll('#queue-table input[type=checkbox][name=issue]'));
  }
  function current() {
    return items().filter(function (el) { return el.getAttribute("data-issue") === cursor; })[0] || null;
  }
  function mark() {
    items().forEach(function (el) {
      var on = el.getAttribute("data-issue") === cursor;
      el.classList.toggle("cursor", on);
      if (on) { el.setAttribute("aria-current", "true"); } else { el.removeAttribute("aria-current"); }
    });
  }
  function move(step) {
    var list = items().filter(function (el) { return el.offsetParent !== null; });  // visible ones
    if (!list.length) { return; }
    var at = -1;
    list.forEach(function (el, n) { if (el.getAttribute("data-issue") === cursor) { at = n; } });
    at = at < 0 ? (step > 0 ? 0 : list.length - 1) : Math.max(0, Math.min(list.length - 1, at + step));
    cursor = list[at].getAttribute("data-issue");
    mark();
    list[at].scrollIntoView({ block: "nearest" });
  }
  function open() {
    var el = current();
    var link = el && el.querySelector("a[href]");
    if (link) { window.location.href = link.href; }
  }
  function count() {
    var out = document.getElementById("bulk-count");
    if (!out) { return; }
    var n = Object.keys(checked).length;
    out.textContent = n ? n + " " + out.getAttribute("data-some") : out.getAttribute("data-none");
    document.body.classList.toggle("has-selection", n > 0);
  }
  function toggle() {
    var el = current();
    var box = el && el.querySelector("input[type=checkbox][name=issue]");
    if (!box) { return; }
    box.checked = !box.checked;
    remember(box);
  }
  function remember(box) {
    if (box.checked) { checked[box.value] = true; } else { delete checked[box.value]; }
    count();
  }
  function restore() {
    boxes().forEach(function (box) { box.checked = !!checked[box.value]; });
    // Selections of rows no longer shown are dropped: only what is seen can be changed.
    var shown = {};
    boxes().forEach(function (box) { shown[box.value] = true; });
    Object.keys(checked).forEach(function (id) { if (!shown[id]) { delete checked[id]; } });
    document.querySelectorAll("#board details[data-column]").forEach(function (d) {
      var name = d.getAttribute("data-column");
      if (name in openColumns) { d.open = openColumns[name]; }
    });
    mark();
    count();
  }
  function help(show) {
    var box = document.getElementById("shortcuts-help");
    if (!box) { return; }
    box.hidden = show === undefined ? !box.hidden : !show;
    if (!box.hidden) { var close = document.getElementById("shortcuts-close"); if (close) { close.focus(); } }
  }
  function typing(target) {
    var tag = (target && target.tagName) || "";
    if (tag === "INPUT" && (target.type === "checkbox" || target.type === "radio")) { return false; }  // keys still move
    return tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA" || (target && target.isContentEditable);
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    var helpBox = document.getElementById("shortcuts-help");
    if (ev.key === "Escape") {
      if (helpBox && !helpBox.hidden) { help(false); ev.preventDefault(); return; }
      if (typing(ev.target)) { ev.target.blur(); }
      return;
    }
    if (typing(ev.target)) { return; }
    if (helpBox && !helpBox.hidden && ev.key !== "?") { return; }
    var link;
    switch (ev.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "Enter": case "o":
        if (!cursor || (ev.key === "Enter" && ev.target.closest && ev.target.closest("a, button"))) { return; }
        open(); break;
      case "x": toggle(); break;
      case "/": var q = document.getElementById("queue-search"); if (q) { q.focus(); q.select(); } break;
      case "b":
        link = document.querySelector(".view-switch a:not(.active)");
        if (link) { window.location.href = link.href; }
        break;
      case "c":
        link = document.querySelector(".page-head .actions a.primary");
        if (link) { window.location.href = link.href; }
        break;
      case "?": help(); break;
      default: return;
    }
    ev.preventDefault();
  });

  document.addEventListener("change", function (ev) {
    var t = ev.target;
    if (t.matches && t.matches('#queue-table input[type=checkbox][name=issue]')) { remember(t); }
    if (t.id === "select-all") {
      boxes().forEach(function (box) { box.checked = t.checked; remember(box); });
    }
  });
  document.addEventListener("toggle", function (ev) {
    var d = ev.target;
    if (d.matches && d.matches("#board details[data-column]")) { openColumns[d.getAttribute("data-column")] = d.open; }
  }, true);
  document.addEventListener("click", function (ev) {
    if (ev.target.id === "shortcuts-close") { help(false); }
    else if (ev.target.id === "shortcuts-help") { help(false); }  // a click on the backdrop
  });
  document.addEventListener("htmx:afterSwap", restore);
  boxes().forEach(function (box) { if (box.checked) { checked[box.value] = true; } });  // back/forward cache
  count();
})();
