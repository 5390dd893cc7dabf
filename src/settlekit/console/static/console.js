// Progressive enhancement: refresh the overview's panel every 15 s (the page works without it).
(function () {
  "use strict";
  var panel = document.getElementById("overview-panel");
  if (!panel || !window.fetch) { return; }
  var url = panel.getAttribute("data-refresh");
  function refresh() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) {
          // the server's own escaped fragment, parsed inertly and moved in
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("overview-panel");
          if (fresh) { panel.replaceChildren.apply(panel, Array.prototype.slice.call(fresh.childNodes)); }
          panel.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () {});
  }
  setInterval(refresh, 15000);
  panel.addEventListener("console-refresh", refresh);
}());
