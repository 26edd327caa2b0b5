/* Retasc Dash: an import's page follows its job live. Each `import.progress` event on the
 * org's socket (dash.js fires them as `retasc:live`) that names this import makes the
 * fragment (#import-live, hx-trigger="retasc:live-import") read itself again through its
 * permission-checked view. The socket's first connection also refreshes it once, so a job
 * that moved between the page load and the connection is not missed. A finished job's
 * fragment stops listening.
 */
(function () {
  "use strict";
  var body = document.body;

  function refresh() {
    var el = document.querySelector("[data-live-import]");
    if (el && el.getAttribute("data-finished") !== "true") {
      el.dispatchEvent(new CustomEvent("retasc:live-import"));
    }
  }
  body.addEventListener("retasc:live", function (ev) {
    var el = document.querySelector("[data-live-import]");
    if (!el) { return; }
    var id = el.getAttribute("data-live-import");
    var mine = ev.detail.all || (ev.detail.events || []).some(function (e) {
      return e.verb === "import.progress" && e["import"] && e["import"].importId === id;
    });
    if (mine) { refresh(); }
  });
  var seen = body.getAttribute("data-live") === "on";
  if (seen) { refresh(); }
  new MutationObserver(function () {
    if (!seen && body.getAttribute("data-live") === "on") { seen = true; refresh(); }
  }).observe(body, { attributes: true, attributeFilter: ["data-live"] });
})();
