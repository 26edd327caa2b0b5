/* Retasc Dash: the live feed (one websocket per page) and lease countdowns.
 *
 * Each message from /ws/org/ names what changed ({verb, issue, runtime}); this script
 * batches them for 150 ms and fires one `retasc:live` event on <body> with
 * detail.issues (identifiers) and detail.all (true after a reconnect, when events may
 * have been missed). Fragments listen with hx-trigger="retasc:live from:body" (an issue's
 * own fragment: "retasc:live-issue") and GET themselves again: no content ever travels
 * over the socket.
 */
(function () {
  "use strict";
  var body = document.body;
  var path = body.getAttribute("data-live-url");
  var indicator = document.getElementById("live-state");
  var pending = [], timer = null, delay = 500, opened = false, socket = null;

  function setState(state) {
    if (indicator) { indicator.setAttribute("data-state", state); }
    body.setAttribute("data-live", state);
  }
  function fire(all) {
    var events = pending; pending = []; timer = null;
    var issues = [];
    events.forEach(function (e) { if (e.issue && issues.indexOf(e.issue) < 0) { issues.push(e.issue); } });
    body.dispatchEvent(new CustomEvent("retasc:live", { detail: { events: events, issues: issues, all: !!all } }));
    // An issue's own fragment (data-live-issue="ACME-12") hears only about itself. Done
    // here, not in an hx-trigger filter: htmx evaluates filters, and the CSP allows no eval.
    document.querySelectorAll("[data-live-issue]").forEach(function (el) {
      if (all || issues.indexOf(el.getAttribute("data-live-issue")) >= 0) {
        el.dispatchEvent(new CustomEvent("retasc:live-issue", { detail: { issues: issues, all: !!all } }));
      }
    });
  }
  function connect() {
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(proto + location.host + path);
    socket.onopen = function () {
      setState("on");
      delay = 500;
      if (opened) { fire(true); }  // we may have missed events while away
      opened = true;
    };
    socket.onmessage = function (msg) {
      var data;
      try { data = JSON.parse(msg.data); } catch (e) { return; }
      if (data.type !== "events") { return; }
      pending = pending.concat(data.events || []);
      if (!timer) { timer = setTimeout(fire, 150); }
    };
    socket.onclose = function (ev) {
      setState("off");
      if (ev.code === 4401 || ev.code === 4403) { return; }  // signed out / no org: stay quiet
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
  }
  if (path && "WebSocket" in window) { connect(); }

  // Lease countdowns: <span class="countdown" data-expires="ISO">.
  function pad(n) { return n < 10 ? "0" + n : "" + n; }
  function tick() {
    var now = Date.now();
    document.querySelectorAll(".countdown[data-expires]").forEach(function (el) {
      var left = Math.round((Date.parse(el.getAttribute("data-expires")) - now) / 1000);
      if (isNaN(left)) { return; }
      if (left <= 0) { el.textContent = el.getAttribute("data-expired-label") || "expired"; el.classList.add("gone"); return; }
      var h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
      el.textContent = (h ? h + ":" + pad(m) : m) + ":" + pad(s);
      el.classList.toggle("low", left < 120);
    });
  }
  tick();
  setInterval(tick, 1000);
  document.addEventListener("htmx:afterSwap", tick);

  // The language switcher submits on change (a button remains for no-JS).
  document.querySelectorAll("select[data-autosubmit]").forEach(function (el) {
    el.addEventListener("change", function () { el.form.submit(); });
  });
  // Copy buttons next to shown-once secrets.
  document.querySelectorAll("[data-copy]").forEach(function (btn) {
    btn.addEventListener("click", function () {
      var target = document.getElementById(btn.getAttribute("data-copy"));
      if (target && navigator.clipboard) { navigator.clipboard.writeText(target.textContent.trim()); btn.textContent = "✓"; }
    });
  });
  // Forms that ask first: <form data-confirm="Question?">. Delegated, so forms swapped
  // in by htmx ask too; no inline handlers (the Content-Security-Policy forbids them).
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { ev.preventDefault(); }
  }, true);
  // Typed confirmations: <input data-confirm-text="acme"> enables its form's submit
  // button only once the expected text is typed (the server checks it again).
  document.querySelectorAll("input[data-confirm-text]").forEach(function (input) {
    var button = input.form && input.form.querySelector("button[type=submit]");
    function sync() { if (button) { button.disabled = input.value.trim() !== input.getAttribute("data-confirm-text"); } }
    input.addEventListener("input", sync);
    sync();
  });
})();
