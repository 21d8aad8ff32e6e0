// The reads of the page being opened, started at once: a classic script, run while the
// HTML is parsed, so they travel while the modules load and evaluate (a page's module
// would start them only after all of that). The page takes each answer once through
// dom.js's early(); what a page reads later, or on a switch, is fetched as usual.
// The paths must match the pages' own reads exactly (a browser test checks each first
// screen asks for nothing twice).
(function () {
  "use strict";
  var since = function (days) { // to the minute: the page computes the same address
    return Math.floor(Date.now() / 60000) * 60 - days * 86400;
  };
  var FIRST = {
    calls: ["/v1/calls?limit=100"],
    memories: ["/v1/memories?limit=200", "/v1/facts"],
    sessions: ["/v1/sessions?limit=50"],
    usage: ["day", "model", "client", "workspace"].map(function (group) {
      return "/v1/usage?group_by=" + group + "&since=" + since(7);
    }),
    health: ["/health", "/v1/status", "/v1/jobs?state=pending", "/v1/jobs?state=dead",
             "/v1/sweeps?limit=20"],
    pause: ["/v1/pause"],
  };
  var name = location.hash.slice(1) || "calls";
  var reads = new Map();
  (FIRST[name] || FIRST.calls).forEach(function (path) {
    var answer = fetch(path, { credentials: "same-origin" });
    answer.catch(function () {}); // a failure is the page's to report when it takes it
    reads.set(path, answer);
  });
  window.memdEarlyReads = reads;
})();
