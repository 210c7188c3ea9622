// tide's dashboard: a client of the head's HTTP API (the CLI's), updated
// live by long-polling GET /watch. The token, when the head requires one, is
// asked for once and kept in sessionStorage; it travels only in the
// Authorization header. Every list the page keeps is bounded, and each
// refresh replaces the view's DOM, so a page left open does not grow.
(function () {
  "use strict";
  var TOKEN_KEY = "tide-token";
  var MAX_SAMPLES = 2880, MAX_EVENTS = 500, MAX_ROWS = 500, MAX_LOG = 256 * 1024;
  var main = document.getElementById("main");
  var statusEl = document.getElementById("status");
  var state = {
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    authRequired: false,
    version: 0,
    history: {},   // pool -> {seq, samples[]} (bounded)
    route: null,
    view: null,    // {refresh: fn, stop: fn}
    refreshing: false, again: false, lastRefresh: 0, lastCost: 0, timer: 0,
    watchAbort: null, renderMs: 0, refreshes: 0,
    minGap: 1000,  // the shortest time between two refreshes (tests lower it)
  };
  window.tideDashboard = state; // for tests: render timings and versions

  function esc(s) {
    return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function fmt(n, d) { return (n === null || n === undefined) ? "" : Number(n).toFixed(d === undefined ? 0 : d); }
  function money(n) { n = Number(n || 0); return "$" + n.toFixed(n && n < 0.01 ? 4 : 2); }
  function age(sec) {
    if (!sec && sec !== 0) return "";
    sec = Math.floor(sec);
    if (sec < 120) return sec + "s";
    if (sec < 7200) return Math.floor(sec / 60) + "m";
    if (sec < 172800) return Math.floor(sec / 3600) + "h";
    return Math.floor(sec / 86400) + "d";
  }
  function since(t) { return t ? age((Date.now() - Date.parse(t)) / 1000) : ""; }
  function res(r) {
    if (!r) return "";
    var s = fmt(r.cpu_cores, r.cpu_cores % 1 ? 1 : 0) + " cpu, " + r.memory_mb + " MiB";
    if (r.gpu_units) s += ", " + r.gpu_units + " gpu";
    return s;
  }
  function use(u, t) {
    if (!t) return "";
    var s = fmt(u.cpu_cores, 1) + "/" + fmt(t.cpu_cores, 1) + " cpu · " + u.memory_mb + "/" + t.memory_mb + " MiB";
    if (t.gpu_units) s += " · " + u.gpu_units + "/" + t.gpu_units + " gpu";
    return s;
  }
  function isAdmin() { return state.authRequired && !!state.token; }
  function setStatus(msg) { statusEl.textContent = msg; }

  // api calls the head. A 401 drops the token and shows the login.
  function api(path, opts) {
    opts = opts || {};
    var headers = {"Accept": "application/json"};
    if (state.token) headers["Authorization"] = "Bearer " + state.token;
    return fetch(path, {method: opts.method || "GET", headers: headers, signal: opts.signal, cache: "no-store",
      credentials: "omit"}).then(function (r) {
      if (r.status === 401) {
        var e = new Error("unauthorized"); e.unauthorized = true; throw e;
      }
      return r.json().then(function (body) {
        if (!r.ok) {
          var err = new Error(typeof body.detail === "string" ? body.detail : ("HTTP " + r.status));
          err.status = r.status; throw err;
        }
        if (opts.total) return {items: body, total: +(r.headers.get("X-Total-Count") || body.length)};
        return body;
      });
    });
  }

  function q(params) {
    var parts = [];
    Object.keys(params).forEach(function (k) {
      var v = params[k];
      if (v === undefined || v === null) return;
      (Array.isArray(v) ? v : [v]).forEach(function (x) { parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(x)); });
    });
    return parts.length ? "?" + parts.join("&") : "";
  }

  // ---- login -------------------------------------------------------------

  function showLogin(message) {
    stopView();
    stopWatch();
    state.token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    state.authRequired = true;
    state.history = {};
    document.getElementById("nav").hidden = true;
    document.getElementById("signout").hidden = true;
    document.getElementById("who").textContent = "";
    main.innerHTML = '<form class="login" id="login" autocomplete="off">' +
      "<h1>Sign in to tide</h1><p>This head requires its admin token.</p>" +
      (message ? '<p class="error" role="alert">' + esc(message) + "</p>" : "") +
      '<label for="token">Admin token</label>' +
      '<input id="token" name="token" type="password" required autocomplete="off" spellcheck="false">' +
      '<button type="submit">Sign in</button></form>';
    setStatus("");
    var input = document.getElementById("token");
    input.focus();
    document.getElementById("login").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var tok = input.value.trim();
      input.value = "";
      if (!tok) return;
      state.token = tok;
      api("/pools").then(function () {
        sessionStorage.setItem(TOKEN_KEY, tok);
        start();
      }, function (e) {
        showLogin(e.unauthorized ? "The head refused this token." : ("Could not reach the head: " + e.message));
      });
    });
  }

  document.getElementById("signout").addEventListener("click", function () { showLogin(""); });

  // ---- routing and refresh -----------------------------------------------

  function parseRoute() {
    var h = location.hash.replace(/^#/, "") || "/";
    var qi = h.indexOf("?");
    var path = qi < 0 ? h : h.slice(0, qi);
    var params = {};
    if (qi >= 0) {
      h.slice(qi + 1).split("&").forEach(function (kv) {
        if (!kv) return;
        var i = kv.indexOf("=");
        var k = decodeURIComponent(i < 0 ? kv : kv.slice(0, i));
        params[k] = i < 0 ? "" : decodeURIComponent(kv.slice(i + 1).replace(/\+/g, " "));
      });
    }
    var parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    return {path: path, parts: parts, params: params};
  }

  function stopView() {
    if (state.view && state.view.stop) state.view.stop();
    state.view = null;
    clearTimeout(state.timer);
  }

  function route() {
    stopView();
    var r = parseRoute();
    state.route = r;
    var section = r.parts[0] || "";
    document.querySelectorAll("nav a").forEach(function (a) {
      var target = a.getAttribute("href").replace(/^#\/?/, "");
      if (target === section) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    });
    var views = {"": overview, nodes: r.parts[1] ? nodePage : nodes, instances: r.parts[1] ? instancePage : instances,
      events: events, workers: workers};
    var make = views[section] || notFound;
    // Each view draws into its own box, so a late answer for the view
    // left behind lands in a detached element, never on the new page.
    r.box = document.createElement("div");
    r.box.innerHTML = "<p class=muted>Loading…</p>";
    main.textContent = "";
    main.appendChild(r.box);
    state.view = make(r);
    state.lastRefresh = 0;
    state.routedAt = performance.now();
    refresh();
  }

  // refresh re-reads the current view, at most once per second and never
  // more often than three times its own cost.
  function refresh() {
    var view = state.view;
    if (!view) return;
    if (state.refreshing) { state.again = true; return; }
    var wait = Math.max(state.minGap, 3 * state.lastCost) - (Date.now() - state.lastRefresh);
    if (state.lastRefresh && wait > 0) {
      clearTimeout(state.timer);
      state.timer = setTimeout(refresh, wait);
      return;
    }
    state.refreshing = true;
    var t0 = performance.now();
    state.lastRefresh = Date.now();
    Promise.resolve().then(function () { return view.refresh(); }).then(function () {
      state.renderMs = performance.now() - t0;
      state.lastRenderAt = performance.now();
      if (!state.firstRenderAt) state.firstRenderAt = state.lastRenderAt;
      state.refreshes++;
      setStatus("Updated " + new Date().toLocaleTimeString());
    }, function (e) {
      if (e && e.unauthorized) { showLogin("Your token is no longer accepted."); return; }
      if (view === state.view) setStatus("Could not update: " + (e && e.message));
    }).then(function () {
      state.lastCost = performance.now() - t0;
      state.refreshing = false;
      if (state.again) { state.again = false; refresh(); }
    });
  }

  function stopWatch() {
    if (state.watchAbort) state.watchAbort.abort();
    state.watchAbort = null;
  }

  // watch long-polls GET /watch and refreshes the view on each change.
  function watch() {
    stopWatch();
    var ctl = new AbortController();
    state.watchAbort = ctl;
    (function loop() {
      if (ctl.signal.aborted) return;
      api("/watch" + q({since: state.version}), {signal: ctl.signal}).then(function (w) {
        if (w.version !== state.version) {
          state.version = w.version;
          refresh();
        }
        loop();
      }, function (e) {
        if (ctl.signal.aborted) return;
        if (e.unauthorized) { showLogin("Your token is no longer accepted."); return; }
        setTimeout(loop, 2000);
      });
    })();
  }

  function start() {
    document.getElementById("nav").hidden = false;
    document.getElementById("signout").hidden = !state.token;
    document.getElementById("who").textContent = isAdmin() ? "admin" : (state.authRequired ? "" : "read-only");
    route();
    watch();
    version();
  }

  // version puts the head's build (GET /version) in the footer; a head
  // without the endpoint leaves it empty.
  function version() {
    api("/version").then(function (v) {
      document.getElementById("footer").textContent = "tide " + v.version + " · commit " +
        String(v.commit).slice(0, 12) + " · built " + v.date + " · " + v.go_version;
    }, function () {});
  }

  window.addEventListener("hashchange", function () { if (state.view || !state.authRequired || state.token) route(); });

  // confirmAction asks in a modal dialog; resolves to true on Confirm.
  function confirmAction(title, text, okLabel) {
    var d = document.getElementById("confirm");
    document.getElementById("confirm-title").textContent = title;
    document.getElementById("confirm-text").textContent = text;
    document.getElementById("confirm-ok").textContent = okLabel;
    return new Promise(function (resolve) {
      d.addEventListener("close", function onClose() {
        d.removeEventListener("close", onClose);
        resolve(d.returnValue === "ok");
      });
      d.returnValue = "";
      d.showModal();
      document.getElementById("confirm-keep").focus();
    });
  }

  // Buttons of every view: one delegated listener.
  main.addEventListener("click", function (ev) {
    var b = ev.target.closest("button[data-action]");
    if (!b || !isAdmin()) return;
    var id = b.getAttribute("data-id"), name = b.getAttribute("data-name") || id;
    var act = b.getAttribute("data-action");
    var spec = {
      cancel: ["Cancel instance", "Cancel instance " + name + "? Its process is stopped after its grace period.",
        "Cancel instance", "/instances/" + encodeURIComponent(id) + "/cancel"],
      cordon: ["Cordon worker", "Cordon worker " + name + "? No new instance is placed on it; what runs there keeps running.",
        "Cordon", "/workers/" + encodeURIComponent(id) + "/cordon"],
      uncordon: ["Uncordon worker", "Uncordon worker " + name + "? New instances may be placed on it again.",
        "Uncordon", "/workers/" + encodeURIComponent(id) + "/uncordon"],
    }[act];
    if (!spec) return;
    confirmAction(spec[0], spec[1], spec[2]).then(function (ok) {
      if (!ok) return;
      b.disabled = true;
      api(spec[3], {method: "POST"}).then(function () {
        setStatus(spec[0] + ": " + name + " done");
        refresh();
      }, function (e) {
        b.disabled = false;
        setStatus(spec[0] + " failed: " + e.message);
      });
    });
  });

  // Filter forms: submitting one rewrites the hash.
  main.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (!f.classList.contains("filters")) return;
    ev.preventDefault();
    var params = {};
    Array.prototype.forEach.call(f.elements, function (e) { if (e.name && e.value) params[e.name] = e.value; });
    location.hash = f.getAttribute("data-path") + q(params);
  });

  // ---- views ---------------------------------------------------------------

  function notFound(r) {
    return {refresh: function () { r.box.innerHTML = "<h1>Not found</h1><p><a href='#/'>Overview</a></p>"; }};
  }

  function mergeHistory(pool, h) {
    var cur = state.history[pool] || {seq: 0, samples: []};
    h.samples.forEach(function (s) {
      if (s.seq > cur.seq) { cur.samples.push(s); cur.seq = s.seq; }
    });
    if (h.samples.length && h.samples[0].seq === 1 && cur.samples.length && cur.samples[0].seq > 1 && cur.seq > h.samples[h.samples.length - 1].seq) {
      cur = {seq: 0, samples: []}; // the head restarted: start over
    }
    if (cur.samples.length > MAX_SAMPLES) cur.samples.splice(0, cur.samples.length - MAX_SAMPLES);
    cur.cost = h.cost_per_hour; cur.cost24 = h.cost_last_24h; cur.since = h.since;
    state.history[pool] = cur;
    return cur;
  }

  // A scale event is the controller applying a new desired count
  // ("desired-changed"); without one, the policy's own Desired* decisions.
  function scaleEvents(evs, pool) {
    var mine = evs.filter(function (e) { return e.pool === pool; });
    var applied = mine.filter(function (e) { return /^desired-?changed$/i.test(e.reason); });
    return applied.length ? applied : mine.filter(function (e) { return /^desired/i.test(e.reason); });
  }

  function overview(r) {
    return {refresh: function () {
      return Promise.all([api("/pools"), api("/events" + q({limit: 500}))]).then(function (got) {
        var pools = got[0], evs = got[1];
        var known = {};
        pools.forEach(function (p) { known[p.name] = true; });
        Object.keys(state.history).forEach(function (k) { if (!known[k]) delete state.history[k]; });
        return Promise.all(pools.map(function (p) {
          var cur = state.history[p.name];
          return api("/history" + q({pool: p.name, since: cur ? cur.seq : 0})).then(function (hs) {
            if (hs.length) mergeHistory(p.name, hs[0]);
          });
        })).then(function () { drawOverview(r.box, pools, evs); });
      });
    }};
  }

  function drawOverview(box, pools, evs) {
    var html = "<h1>Overview</h1>";
    if (!pools.length) html += "<p class=muted>No pools yet: no worker has joined and nothing is queued.</p>";
    pools.forEach(function (p, i) {
      var h = state.history[p.name] || {samples: []};
      var d = p.last_decision;
      var spec = p.node_spec ? ("nodes " + p.node_spec.min + "–" + p.node_spec.max + (p.node_spec.desired ? ", desired " + p.node_spec.desired : "")) : "unmanaged";
      html += '<section class="pool" data-pool="' + esc(p.name) + '" aria-labelledby="pool-' + i + '">' +
        '<h2 id="pool-' + i + '">' + esc(p.name || "(no pool)") + ' <small class="muted">' +
        esc([p.provider, p.policy, spec].filter(Boolean).join(" · ")) + "</small></h2>" +
        '<dl class="figures">' +
        [["desired", p.desired], ["ready", p.ready], ["pending", p.pending], ["draining", p.draining], ["marked", p.marked],
          ["queued", p.queued], ["inflight", p.inflight], ["cost / h", money(h.cost)],
          ["cost, last 24 h", money(h.cost24)]].map(function (f) {
          return "<div><dt>" + f[0] + '</dt><dd class="f-' + f[0].replace(/[^a-z0-9]+/g, "-") + '">' + esc(f[1]) + "</dd></div>";
        }).join("") + "</dl>" +
        '<p class="reason"><strong>Last decision:</strong> ' + (d ? esc(d.reason) + ' <span class="muted">(' + age(d.age_seconds) + " ago)</span>" : '<span class="muted">none yet</span>') + "</p>" +
        '<div class="chartbox" id="chart-' + i + '"></div></section>';
    });
    box.innerHTML = html;
    pools.forEach(function (p, i) {
      var h = state.history[p.name] || {samples: []};
      // The retained samples, then the pool as /pools shows it now (the
      // head samples once a second), so the chart ends where the figures are.
      var now = Date.now();
      var pts = function (f) {
        var out = h.samples.map(function (s) { return [Date.parse(s.time), s[f]]; });
        out.push([now, p[f]]);
        return out;
      };
      var t0 = h.samples.length ? Date.parse(h.samples[0].time) : Date.now() - 60e3;
      var markers = scaleEvents(evs, p.name).map(function (e) {
        return {x: Date.parse(e.time), label: e.time + " " + e.reason + ": " + e.message};
      });
      tideChart.render(box.querySelector("#chart-" + i), {label: p.name + ": desired and ready nodes, queued instances over time",
        height: 240, x: {label: "time (local)", time: true, min: t0, max: now},
        y: {label: "nodes / instances"}, markers: markers, markerName: "scale decision",
        series: [
          {name: "desired nodes", cls: "desired", color: "#1b63b5", step: true, points: pts("desired"), width: 2},
          {name: "ready nodes", cls: "ready", color: "#16803c", step: true, points: pts("ready")},
          {name: "queued instances", cls: "queued", color: "#c2410c", step: true, points: pts("queued"), dash: "5,3"},
        ]});
    });
  }

  function kind(offering) {
    if (!offering) return "";
    var p = offering.split("/");
    return p[p.length - 1];
  }

  function nodes(r) {
    var pool = r.params.pool;
    return {refresh: function () {
      return api("/nodes" + q({pool: pool})).then(function (ns) {
        var admin = isAdmin();
        var html = "<h1>Nodes</h1>" + filterForm("/nodes", [["pool", "Pool", pool]]) +
          "<p class=muted>" + ns.length + " nodes" + (ns.length > MAX_ROWS * 2 ? ", first " + MAX_ROWS * 2 + " shown" : "") + "</p>" +
          "<table><caption class=muted>Nodes by pool and ordinal</caption><thead><tr><th scope=col>node</th><th scope=col>pool</th><th scope=col>offering</th><th scope=col>capacity</th><th scope=col>state</th><th scope=col>age</th><th scope=col>use</th><th scope=col class=num>instances</th><th scope=col>marked</th>" +
          (admin ? "<th scope=col>actions</th>" : "") + "</tr></thead><tbody>";
        ns.slice(0, MAX_ROWS * 2).forEach(function (n) {
          var state_ = n.state + (n.cordoned && n.state !== "cordoned" ? ", cordoned" : "") +
            (n.state === "draining" ? " (" + n.instances + " left)" : "") + (n.worker_status && n.worker_status !== "ONLINE" ? " · " + n.worker_status : "");
          html += "<tr><td><a href='#/nodes/" + encodeURIComponent(n.id) + "'>" + esc(n.id) + "</a></td><td>" + esc(n.pool) +
            "</td><td>" + esc(n.offering) + "</td><td>" + esc(kind(n.offering)) + "</td><td>" + esc(state_) + "</td><td>" + age(n.age_seconds) +
            "</td><td>" + esc(use(n.used_resources, n.total_resources)) + "</td><td class=num>" + n.instances +
            (n.daemons ? " +" + n.daemons + "d" : "") + "</td><td>" + (n.marked_at ? since(n.marked_at) + " ago" : "") + "</td>" +
            (admin ? "<td>" + cordonButton(n) + "</td>" : "") + "</tr>";
        });
        r.box.innerHTML = html + "</tbody></table>";
      });
    }};
  }

  function cordonButton(n) {
    if (!n.worker_status || n.worker_status === "OFFLINE") return "";
    var act = n.cordoned ? "uncordon" : "cordon";
    return '<button type="button" data-action="' + act + '" data-id="' + esc(n.id) + '">' + (n.cordoned ? "Uncordon" : "Cordon") + "</button>";
  }

  function nodePage(r) {
    var id = r.parts[1];
    return {refresh: function () {
      return api("/nodes").then(function (ns) {
        var n = ns.filter(function (x) { return x.id === id; })[0];
        if (!n) { r.box.innerHTML = "<h1>Node " + esc(id) + "</h1><p>No such node (it may have been removed).</p>"; return; }
        return Promise.all([api("/events" + q({pool: n.pool, limit: 2000})), api("/instances" + q({status: "RUNNING"})),
          api("/instances" + q({status: "ASSIGNED"}))]).then(function (x) {
          var evs = x[0].filter(function (e) { return e.node === id || (e.message || "").indexOf(id) >= 0; }).reverse().slice(0, MAX_EVENTS);
          var ins = x[1].concat(x[2]).filter(function (i) { return i.assigned_to === id; });
          var html = "<h1>Node " + esc(id) + "</h1><dl class=kv>" +
            kv("pool", n.pool) + kv("state", n.state + (n.cordoned ? ", cordoned" : "")) + kv("worker", n.worker_status || "not joined") +
            kv("offering", n.offering) + kv("capacity", kind(n.offering)) + kv("machine", n.machine_id) + kv("host", n.host) +
            kv("age", age(n.age_seconds)) + kv("resources", res(n.total_resources)) + kv("in use", res(n.used_resources)) +
            kv("instances", n.instances + (n.daemons ? " and " + n.daemons + " daemons" : "")) +
            kv("marked", n.marked_at ? n.marked_at : "no") + kv("last seen", n.last_seen ? since(n.last_seen) + " ago" : "") + "</dl>" +
            (isAdmin() ? "<p>" + cordonButton(n) + "</p>" : "") +
            "<h2>Instances on it</h2>" + instanceTable(ins, false) +
            "<h2>Events</h2>" + eventTable(evs);
          r.box.innerHTML = html;
        });
      });
    }};
  }

  function kv(k, v) { return "<dt>" + esc(k) + "</dt><dd>" + esc(v) + "</dd>"; }

  function filterForm(path, fields) {
    var html = '<form class="filters" data-path="#' + path + '" role="search" aria-label="Filters">';
    fields.forEach(function (f) {
      var id = "f-" + f[0];
      if (f[3]) {
        html += '<label for="' + id + '">' + f[1] + '<select id="' + id + '" name="' + f[0] + '"><option value="">any</option>' +
          f[3].map(function (o) { return "<option" + (o === f[2] ? " selected" : "") + ">" + esc(o) + "</option>"; }).join("") + "</select></label>";
      } else {
        html += '<label for="' + id + '">' + f[1] + '<input id="' + id + '" name="' + f[0] + '" value="' + esc(f[2] || "") + '"></label>';
      }
    });
    return html + '<button type="submit">Apply</button></form>';
  }

  var STATUSES = ["PENDING", "ASSIGNED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "UNKNOWN"];
  function terminal(s) { return s === "COMPLETED" || s === "FAILED" || s === "CANCELLED"; }

  function instanceTable(ins, total) {
    var admin = isAdmin();
    var html = (total !== false ? "<p class=muted>" + total + " instances" + (ins.length < total ? ", newest " + ins.length + " shown: refine the filter" : "") + "</p>" : "") +
      "<table><thead><tr><th scope=col>name</th><th scope=col>status</th><th scope=col>pool</th><th scope=col>worker</th><th scope=col>requests</th><th scope=col>created</th><th scope=col>waiting because</th>" +
      (admin ? "<th scope=col>actions</th>" : "") + "</tr></thead><tbody>";
    ins.forEach(function (i) {
      html += "<tr><td><a href='#/instances/" + encodeURIComponent(i.instance_id) + "'>" + esc(i.name || i.instance_id.slice(0, 8)) + "</a></td>" +
        '<td class="s-' + esc(i.status) + '">' + esc(i.display_status || i.status) + "</td><td>" + esc(i.pool) + "</td><td>" + esc(i.assigned_to) +
        "</td><td>" + esc(res(i.resource_requirements)) + "</td><td>" + esc(i.created_at) + "</td><td>" + esc(i.waiting_reason) + "</td>" +
        (admin ? "<td>" + (terminal(i.status) ? "" : '<button type="button" data-action="cancel" data-id="' + esc(i.instance_id) +
          '" data-name="' + esc(i.name || i.instance_id) + '">Cancel</button>') + "</td>" : "") + "</tr>";
    });
    return html + "</tbody></table>";
  }

  function instances(r) {
    var p = r.params;
    return {refresh: function () {
      // The head sends the newest MAX_ROWS and the count; a name filter is
      // applied here, so it reads them all.
      return api("/instances" + q({status: p.status, pool: p.pool, label: p.label, limit: p.name ? null : MAX_ROWS}),
        {total: true}).then(function (got) {
        var ins = got.items, total = got.total;
        if (p.name) {
          ins = ins.filter(function (i) { return (i.name || "").indexOf(p.name) >= 0; });
          total = ins.length;
        }
        r.box.innerHTML = "<h1>Instances</h1>" + filterForm("/instances", [["status", "Status", p.status, STATUSES], ["pool", "Pool", p.pool],
          ["label", "Label (k=v)", p.label], ["name", "Name contains", p.name]]) + instanceTable(ins.slice(0, MAX_ROWS), total);
      });
    }};
  }

  function instancePage(r) {
    var id = r.parts[1];
    var logs = {offset: 0, text: "", done: false, busy: false, timer: 0, stopped: false, follow: true, dec: new TextDecoder()};
    var inst = null;
    function pollLogs() {
      if (logs.stopped || logs.busy || !inst || !inst.assigned_to) return;
      logs.busy = true;
      api("/instances/" + encodeURIComponent(id) + "/logs" + q({offset: logs.offset, limit: 65536})).then(function (c) {
        if (c.available_offset > logs.offset) logs.offset = c.available_offset; // rotated away
        if (c.content) {
          // The head relays the worker's bytes base64-encoded.
          var bin = atob(c.content), bytes = new Uint8Array(bin.length);
          for (var k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);
          logs.text += logs.dec.decode(bytes, {stream: true});
          if (logs.text.length > MAX_LOG) logs.text = "…" + logs.text.slice(logs.text.length - MAX_LOG);
          logs.offset += c.size;
          showLogs();
        }
        logs.busy = false;
        var more = c.size > 0;
        if (!logs.stopped && (!terminal(inst.status) || more)) logs.timer = setTimeout(pollLogs, more ? 50 : 1000);
      }, function () {
        logs.busy = false;
        if (!logs.stopped && !terminal(inst.status)) logs.timer = setTimeout(pollLogs, 2000);
      });
    }
    // showLogs shows the kept text; it stays at the end unless the reader
    // scrolled up (the <pre> is redrawn with the view on every refresh).
    function showLogs() {
      var pre = document.getElementById("logs");
      if (!pre) return;
      pre.textContent = logs.text || (inst && inst.assigned_to ? "(no output yet)" : "(not started)");
      if (logs.follow) pre.scrollTop = pre.scrollHeight;
      pre.onscroll = function () { logs.follow = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4; };
    }
    return {
      stop: function () { logs.stopped = true; clearTimeout(logs.timer); },
      refresh: function () {
        var path = "/instances/" + encodeURIComponent(id);
        return Promise.all([api(path), api(path + "/attempts")]).then(function (got) {
          var i = got[0], tries = got[1] || [];
          var first = !inst;
          inst = i;
          var admin = isAdmin();
          var html = "<h1>Instance " + esc(i.name || i.instance_id) + "</h1>" +
            (i.waiting_reason ? '<p class="waiting" role="note"><strong>Waiting:</strong> ' + esc(i.waiting_reason) + "</p>" : "") +
            "<dl class=kv>" + kv("id", i.instance_id) + kv("status", i.display_status || i.status) + kv("command", i.command) +
            kv("pool", i.pool) + kv("worker", i.assigned_to || "") + kv("requests", res(i.resource_requirements)) +
            kv("exit code", i.exit_code === null ? "" : i.exit_code) + kv("failure reason", i.failure_reason || "") +
            kv("labels", Object.keys(i.labels || {}).map(function (k) { return k + "=" + i.labels[k]; }).join(", ")) +
            kv("endpoint", i.endpoint || "") + "</dl>" +
            (admin && !terminal(i.status) ? '<p><button type="button" data-action="cancel" data-id="' + esc(i.instance_id) +
              '" data-name="' + esc(i.name || i.instance_id) + '">Cancel instance</button></p>' : "") +
            '<h2 id="attempts-h">Attempts</h2><p class=muted>created ' + esc(i.created_at) + "; restarts " + i.restarts + " of " +
            i.max_restarts + " (" + esc(i.restart_policy) + ")</p>" + attemptTable(tries) +
            '<h2 id="logs-h">Logs <small class=muted>' + (terminal(i.status) ? "" : "(followed live)") + "</small></h2>" +
            '<pre class="logs" id="logs" tabindex="0" aria-labelledby="logs-h"></pre>';
          r.box.innerHTML = html;
          showLogs();
          if (first || !logs.busy) { clearTimeout(logs.timer); pollLogs(); }
        });
      }};
  }

  // attemptTable lists an instance's attempts, newest first.
  function attemptTable(tries) {
    if (!tries.length) return "<p class=muted>Not placed yet.</p>";
    var html = '<table aria-labelledby="attempts-h"><thead><tr><th scope=col class=num>attempt</th><th scope=col>worker</th><th scope=col>outcome</th>' +
      "<th scope=col>assigned</th><th scope=col>started</th><th scope=col>ended</th><th scope=col class=num>exit code</th><th scope=col>reason</th></tr></thead><tbody>";
    tries.slice().reverse().forEach(function (a) {
      html += "<tr><td class=num>" + a.attempt + "</td><td>" + (a.worker ? "<a href='#/nodes/" + encodeURIComponent(a.worker) + "'>" + esc(a.worker) + "</a>" : "") +
        "</td><td>" + esc(a.status) + "</td><td>" + esc(a.assigned_at || "") + "</td><td>" + esc(a.started_at || "") + "</td><td>" +
        esc(a.ended_at || "") + "</td><td class=num>" + (a.exit_code === null ? "" : a.exit_code) + "</td><td>" + esc(a.reason) + "</td></tr>";
    });
    return html + "</tbody></table>";
  }

  function eventTable(evs) {
    var html = "<table><thead><tr><th scope=col>time</th><th scope=col>pool</th><th scope=col>node</th><th scope=col>type</th><th scope=col>reason</th><th scope=col>message</th></tr></thead><tbody>";
    evs.forEach(function (e) {
      html += "<tr><td>" + esc(new Date(e.time).toLocaleTimeString()) + "</td><td>" + esc(e.pool) + "</td><td>" +
        (e.node ? "<a href='#/nodes/" + encodeURIComponent(e.node) + "'>" + esc(e.node) + "</a>" : "") + "</td><td>" + esc(e.type) +
        "</td><td>" + esc(e.reason) + "</td><td>" + esc(e.message) + "</td></tr>";
    });
    return html + "</tbody></table>";
  }

  function events(r) {
    var p = r.params;
    return {refresh: function () {
      return api("/events" + q({pool: p.pool, limit: MAX_EVENTS})).then(function (evs) {
        evs = evs.filter(function (e) {
          return (!p.type || e.type === p.type) && (!p.reason || e.reason.toLowerCase().indexOf(p.reason.toLowerCase()) >= 0);
        }).reverse();
        r.box.innerHTML = "<h1>Events</h1>" + filterForm("/events", [["pool", "Pool", p.pool], ["type", "Type", p.type, ["Normal", "Warning"]],
          ["reason", "Reason contains", p.reason]]) + "<p class=muted>" + evs.length + " events (newest first, last " + MAX_EVENTS + " read)</p>" + eventTable(evs);
      });
    }};
  }

  function workers(r) {
    return {refresh: function () {
      return api("/workers").then(function (ws) {
        var html = "<h1>Workers</h1><p class=muted>" + ws.length + " workers</p><table><thead><tr><th scope=col>worker</th><th scope=col>host</th><th scope=col>status</th><th scope=col>pool</th><th scope=col>total</th><th scope=col>available</th><th scope=col>free GPUs</th><th scope=col>last seen</th><th scope=col>labels</th></tr></thead><tbody>";
        ws.slice(0, MAX_ROWS * 2).forEach(function (w) {
          html += "<tr><td><a href='#/nodes/" + encodeURIComponent(w.worker_id) + "'>" + esc(w.worker_id) + "</a></td><td>" + esc(w.host) +
            "</td><td>" + esc(w.status) + "</td><td>" + esc(w.pool) + "</td><td>" + esc(res(w.total_resources)) + "</td><td>" +
            esc(res(w.available_resources)) + "</td><td>" + esc((w.available_gpu_indices || []).join(",")) + "</td><td>" + esc(w.last_seen) +
            "</td><td>" + esc(Object.keys(w.labels || {}).map(function (k) { return k + "=" + w.labels[k]; }).join(", ")) + "</td></tr>";
        });
        r.box.innerHTML = html + "</tbody></table>";
      });
    }};
  }

  // ---- start ---------------------------------------------------------------

  // Probe once: a 401 without a token means the head requires one.
  api("/pools").then(function () {
    state.authRequired = !!state.token;
    start();
  }, function (e) {
    if (e.unauthorized) { showLogin(state.token ? "Your token is no longer accepted." : ""); return; }
    main.innerHTML = '<p class="error" role="alert">Could not reach the head: ' + esc(e.message) + "</p>";
  });
})();
