/// The live dashboard: one page (its CSS and JavaScript served beside it at `/dashboard.css` and
/// `/dashboard.js`, nothing loaded from elsewhere, no build step) that polls `/api/dashboard` every 2 s
/// and draws totals with per-second rates, the last hour per minute, campaigns with progress and ETA,
/// connections and rejections by reason.
///
/// Rates: "now" is the change of the totals between two polls (a short live window, per second);
/// "last min" is the last complete minute's hash ÷ 60. A campaign's rate and ETA come from its settled
/// count over the last ~30 s of polls. Numbers carry `data-*` attributes with the raw values (tests read them).
///
/// Nothing inline: ``OperationsServer`` serves the page with a Content-Security-Policy allowing scripts and
/// styles from the same origin only, so markup that got into a rendered value could run nothing. The
/// page and its two files hold no data and are served without the operations token; `/api/dashboard`
/// asks for it (the script asks the user once, see `askForToken`).
enum DashboardPage {
    static let html = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>apns-pipeline</title>
        <link rel="stylesheet" href="/dashboard.css">
        <script src="/dashboard.js" defer></script>
        </head>
        <body>
        <header>
          <h1>apns-pipeline</h1>
          <span id="status" class="pill live">live</span>
          <span class="meta" id="meta">loading…</span>
        </header>
        <main>
          <div id="banner"></div>
          <section id="login"><h2>Operations token</h2>
            <p>This surface asks for a bearer token (the pipeline file's <code>metrics.auth_token</code>, or its
            <code>metrics.control_token</code>, which also works the campaign buttons). It is kept in this
            tab only (sessionStorage) and sent with every request of the page.</p>
            <form id="login-form"><input id="token" type="password" autocomplete="off" spellcheck="false" placeholder="token" aria-label="token">
            <button type="submit">Open the dashboard</button></form></section>
          <div class="tiles" id="tiles"></div>
          <section class="chart"><h2>Last hour, per minute</h2><div id="chart"></div>
            <div class="legend" id="legend"></div></section>
          <section class="reasons"><h2>Rejections by reason</h2><div id="reasons"></div>
            <h2>Retries by reason</h2><div id="retries"></div>
            <h2>Broadcasts</h2><div id="broadcasts"></div></section>
          <section class="campaigns"><h2>Campaigns</h2><div id="control-note" class="note"></div><div id="campaigns"></div></section>
          <section class="connections"><h2>Gateway connections</h2><div id="connections"></div></section>
        </main>
        </body>
        </html>
        """#

    static let css = #"""
        :root { --bg:#0f1419; --panel:#171e26; --line:#26313d; --text:#dce3ea; --dim:#8694a3; --ok:#3fb950; --bad:#f85149;
                --warn:#d29922; --info:#58a6ff; --dup:#8b949e; --dead:#bc8cff; }
        * { box-sizing: border-box; }
        body { margin:0; background:var(--bg); color:var(--text); font:14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
        header { display:flex; align-items:center; gap:16px; padding:14px 24px; border-bottom:1px solid var(--line); }
        header h1 { font-size:18px; margin:0; font-weight:600; letter-spacing:.2px; }
        header .meta { color:var(--dim); font-size:12px; margin-left:auto; }
        .pill { padding:2px 10px; border-radius:999px; font-size:12px; font-weight:600; }
        .pill.live { background:rgba(63,185,80,.15); color:var(--ok); }
        .pill.down { background:rgba(248,81,73,.15); color:var(--bad); }
        main { padding:18px 24px; display:grid; gap:18px; grid-template-columns: repeat(12, 1fr); }
        section { background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:14px 16px; min-width:0; }
        section h2 { font-size:13px; text-transform:uppercase; letter-spacing:.6px; color:var(--dim); margin:0 0 10px; font-weight:600; }
        .tiles { grid-column: span 12; display:grid; grid-template-columns: repeat(auto-fit, minmax(118px,1fr)); gap:10px; background:none; border:none; padding:0; }
        .tile { background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:12px 14px; border-top:3px solid var(--c, var(--info)); }
        .tile .name { color:var(--dim); font-size:12px; }
        .tile .value { font-size:22px; font-weight:600; font-variant-numeric: tabular-nums; margin:2px 0; }
        .tile .rate { font-size:12px; color:var(--dim); font-variant-numeric: tabular-nums; }
        .tile .rate b { color:var(--text); font-weight:600; }
        .chart { grid-column: span 8; }
        .reasons { grid-column: span 4; }
        .campaigns, .connections { grid-column: span 12; }
        @media (max-width: 1100px) { .chart, .reasons { grid-column: span 12; } }
        svg { width:100%; height:180px; display:block; }
        .legend { display:flex; gap:14px; font-size:12px; color:var(--dim); margin-top:6px; flex-wrap:wrap; }
        .legend i { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:5px; vertical-align:-1px; }
        table { width:100%; border-collapse:collapse; font-variant-numeric: tabular-nums; }
        th { text-align:left; color:var(--dim); font-weight:500; font-size:12px; padding:6px 8px; border-bottom:1px solid var(--line); white-space:nowrap; }
        td { padding:7px 8px; border-bottom:1px solid var(--line); vertical-align:middle; }
        td.num, th.num { text-align:right; }
        tr:last-child td { border-bottom:none; }
        .bar { position:relative; height:16px; background:#0b1015; border-radius:4px; overflow:hidden; min-width:160px; display:flex; }
        .bar span { display:block; height:100%; }
        .bar .label { position:absolute; inset:0; font-size:11px; line-height:16px; text-align:center; color:#fff; text-shadow:0 0 3px #000; }
        .dot { display:inline-block; width:8px; height:8px; border-radius:50%; margin-right:6px; background:var(--dup); }
        .state-connected .dot { background:var(--ok); } .state-connecting .dot, .state-backing-off .dot, .state-waiting .dot { background:var(--warn); }
        .state-stopped .dot, .state-closed .dot { background:var(--bad); }
        .err { color:var(--bad); font-size:12px; max-width:420px; overflow:hidden; text-overflow:ellipsis; white-space:nowrap; }
        .dim { color:var(--dim); }
        .empty { color:var(--dim); padding:10px 0; }
        #banner { display:none; grid-column: span 12; background:rgba(248,81,73,.12); border:1px solid var(--bad); color:var(--bad); padding:10px 14px; border-radius:8px; }
        .done { color:var(--ok); font-weight:600; }
        .note { color:var(--dim); min-height:1.2em; }
        td.state[data-state*="paused"] { color:var(--warn); } td.state[data-state*="cancelled"] { color:var(--dead); }
        button.ctl { font:inherit; font-size:12px; padding:1px 8px; border-radius:4px; border:1px solid var(--dim); background:none; color:inherit; cursor:pointer; }
        button.ctl.danger { border-color:var(--bad); color:var(--bad); }
        #login { display:none; grid-column: span 12; max-width:520px; }
        #login p { margin:0 0 10px; color:var(--dim); }
        #login input { width:100%; padding:8px 10px; background:#0b1015; color:var(--text); border:1px solid var(--line); border-radius:6px; font:inherit; }
        #login button { margin-top:10px; padding:7px 16px; background:var(--info); color:#0b1015; border:none; border-radius:6px; font-weight:600; cursor:pointer; }
        """#

    static let script = #"""
        "use strict";
        const OUTCOMES = [
          ["accepted", "Accepted", "var(--ok)"], ["rejected", "Rejected", "var(--bad)"], ["suppressed", "Suppressed", "var(--warn)"],
          ["deduped", "Deduped", "var(--dup)"], ["dead_lettered", "Dead-lettered", "var(--dead)"],
          ["capped", "Capped", "var(--warn)"], ["quiet", "Quiet hours", "var(--dup)"], ["held_out", "Held out", "var(--dup)"]];
        const TILES = [["received", "Received", "var(--info)"], ...OUTCOMES,
          ["ambiguous", "Ambiguous", "var(--warn)"], ["replayed", "Replayed", "var(--info)"], ["reconnects", "Reconnects", "var(--dup)"],
          ["retried", "Retried", "var(--warn)"], ["gave_up", "Gave up", "var(--dead)"]];
        const history = [];          // {t, totals, campaigns: {id: settled}}
        const fmt = n => (n ?? 0).toLocaleString("en-US");
        const esc = s => String(s ?? "").replace(/[&<>"']/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c]));
        const settledOf = c => OUTCOMES.reduce((a, [k]) => a + (c[k] || 0), 0);
        function rate(now, past, get) {
          if (!past || now.t <= past.t) return null;
          return Math.max(0, (get(now) - get(past)) / (now.t - past.t));
        }
        function fmtRate(r) { return r == null ? "–" : (r >= 100 ? fmt(Math.round(r)) : r.toFixed(1)); }
        function fmtDuration(s) {
          if (s == null || !isFinite(s)) return "–";
          s = Math.round(s);
          if (s < 60) return s + " s";
          if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
          return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
        }
        function since(epoch, now) { return epoch ? fmtDuration(now - epoch) : "–"; }

        function renderTiles(d, cur, prev) {
          const lastMinute = d.minutes.length > 1 ? d.minutes[d.minutes.length - 2].counters : {};
          put("tiles", TILES.map(([k, name, color]) => {
            const r = rate(cur, prev, h => h.totals[k] || 0);
            return `<div class="tile" data-style="--c:${color}" data-field="${k}" data-total="${d.totals[k] || 0}">
              <div class="name">${name}</div><div class="value">${fmt(d.totals[k])}</div>
              <div class="rate"><b>${fmtRate(r)}</b>/s now</div><div class="rate">${fmtRate((lastMinute[k] || 0) / 60)}/s last min</div></div>`;
          }).join(""));
        }

        function renderChart(d) {
          const W = 720, H = 180, pad = 22, n = d.minutes.length;
          const maxv = Math.max(1, ...d.minutes.map(m => settledOf(m.counters)));
          const bw = (W - pad) / Math.max(1, n);
          let bars = "";
          d.minutes.forEach((m, i) => {
            let y = H - pad;
            for (const [k, , color] of OUTCOMES) {
              const v = m.counters[k] || 0; if (!v) continue;
              const h = v / maxv * (H - pad - 8);
              y -= h;
              bars += `<rect x="${pad + i * bw + 1}" y="${y}" width="${Math.max(1, bw - 2)}" height="${h}" fill="${color}"><title>${new Date(m.start * 1000).toISOString().slice(11, 16)} UTC ${k}: ${fmt(v)}</title></rect>`;
            }
          });
          const grid = [0.5, 1].map(f => `<line x1="${pad}" x2="${W}" y1="${H - pad - f * (H - pad - 8)}" y2="${H - pad - f * (H - pad - 8)}" stroke="#26313d"/>
            <text x="0" y="${H - pad - f * (H - pad - 8) + 4}" fill="#8694a3" font-size="10">${fmt(Math.round(maxv * f))}</text>`).join("");
          const first = d.minutes[0], last = d.minutes[n - 1];
          const axis = first ? `<text x="${pad}" y="${H - 6}" fill="#8694a3" font-size="10">${new Date(first.start * 1000).toISOString().slice(11, 16)} UTC</text>
            <text x="${W - 40}" y="${H - 6}" fill="#8694a3" font-size="10">now</text>` : "";
          put("chart", `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">${grid}${bars}${axis}</svg>`);
          put("legend", OUTCOMES.map(([, name, color]) => `<span><i data-style="background:${color}"></i>${name}</span>`).join(""));
        }

        function renderReasons(d) {
          const recent = {};
          for (const m of d.minutes.slice(-15)) for (const [k, v] of Object.entries(m.counters)) if (k.startsWith("rejected:")) recent[k] = (recent[k] || 0) + v;
          const codes = Object.keys(d.totals).filter(k => k.startsWith("rejected:"));
          codes.sort((a, b) => (recent[b] || 0) - (recent[a] || 0) || d.totals[b] - d.totals[a]);
          put("reasons", codes.length === 0 ? `<div class="empty">No gateway refusals.</div>` :
            `<table><tr><th>reason</th><th class="num">last 15 min</th><th class="num">total</th></tr>` +
            codes.map(k => `<tr data-reason="${esc(k.slice(9))}"><td>${esc(k.slice(9))}</td><td class="num">${fmt(recent[k] || 0)}</td><td class="num">${fmt(d.totals[k])}</td></tr>`).join("") + `</table>`);
          // HTTP/2 resends by reason (\`retried:<reason>\`): an Apple incident shows here before anything is given up.
          const retries = {};
          for (const m of d.minutes.slice(-15)) for (const [k, v] of Object.entries(m.counters)) if (k.startsWith("retried:")) retries[k] = (retries[k] || 0) + v;
          const why = Object.keys(d.totals).filter(k => k.startsWith("retried:"));
          why.sort((a, b) => (retries[b] || 0) - (retries[a] || 0) || d.totals[b] - d.totals[a]);
          put("retries", why.length === 0 ? `<div class="empty">No retries.</div>` :
            `<table><tr><th>reason</th><th class="num">last 15 min</th><th class="num">total</th></tr>` +
            why.map(k => `<tr data-retry="${esc(k.slice(8))}"><td>${esc(k.slice(8))}</td><td class="num">${fmt(retries[k] || 0)}</td><td class="num">${fmt(d.totals[k])}</td></tr>`).join("") + `</table>`);
          // Broadcasts (\`broadcast:<outcome>\`), counted apart: one request each, reaching every device
          // subscribed to its channel, so a handful here can outweigh thousands of device pushes.
          const sent = OUTCOMES.filter(([k]) => (d.totals["broadcast:" + k] || 0) > 0);
          const recentB = {};
          for (const m of d.minutes.slice(-15)) for (const [k, v] of Object.entries(m.counters)) if (k.startsWith("broadcast:")) recentB[k] = (recentB[k] || 0) + v;
          put("broadcasts", sent.length === 0 ? `<div class="empty">No broadcasts.</div>` :
            `<table><tr><th>outcome</th><th class="num">last 15 min</th><th class="num">total</th></tr>` +
            sent.map(([k, name]) => `<tr data-broadcast="${k}"><td>${name}</td><td class="num">${fmt(recentB["broadcast:" + k] || 0)}</td><td class="num">${fmt(d.totals["broadcast:" + k])}</td></tr>`).join("") + `</table>`);
        }

        function renderCampaigns(d, cur) {
          if (d.campaigns.length === 0) { put("campaigns", `<div class="empty">No campaigns in Redis.</div>`); return; }
          // Unfinished first, then by id.
          const rows = d.campaigns.map(c => ({c, settled: settledOf(c.counters)}));
          rows.sort((a, b) => ((a.settled >= a.c.published) - (b.settled >= b.c.published)) || a.c.id.localeCompare(b.c.id));
          const back = history.find(h => cur.t - h.t <= 30) || null;
          put("campaigns", `<table><tr><th>campaign</th><th>progress</th>
            <th class="num">published</th>${OUTCOMES.map(([, n]) => `<th class="num">${n.toLowerCase()}</th>`).join("")}
            <th class="num">rate</th><th class="num">ETA</th><th>state</th><th class="num">held</th>${d.controls ? "<th></th>" : ""}</tr>` + rows.map(({c, settled}) => {
              const p = c.published || 0;
              const segs = OUTCOMES.map(([k, , color]) => `<span data-style="width:${p ? Math.min(100, (c.counters[k] || 0) / p * 100) : 0}%;background:${color}"></span>`).join("");
              const pct = p ? Math.min(100, settled / p * 100) : 0;
              const r = back && back !== cur && back.campaigns[c.id] != null ? rate(cur, back, h => h.campaigns[c.id] || 0) : null;
              const done = p > 0 && settled >= p;
              const eta = done ? `<span class="done">done</span>` : (r ? fmtDuration((p - settled) / r) : "–");
              return `<tr data-campaign="${esc(c.id)}" data-published="${p}" data-settled="${settled}">
                <td>${esc(c.id)}</td><td><div class="bar">${segs}<div class="label">${pct.toFixed(1)}%</div></div></td>
                <td class="num">${fmt(p)}</td>${OUTCOMES.map(([k]) => `<td class="num" data-field="${k}" data-value="${c.counters[k] || 0}">${fmt(c.counters[k])}</td>`).join("")}
                <td class="num">${r == null ? "–" : fmtRate(r) + "/s"}</td><td class="num">${eta}</td>
                <td class="state" data-state="${esc(c.state)}">${esc(c.state)}</td>
                <td class="num" data-held="${c.heldJobs || 0}">${c.heldJobs ? fmt(c.heldJobs) + " (" + fmtBytes(c.heldBytes) + ")" : "–"}</td>${d.controls ? `<td>${controlButtons(c)}</td>` : ""}</tr>`;
            }).join("") + `</table>` + heldLine(d));
        }

        // Everything held in Redis (the held-bytes caps count it), apps' max_rate included.
        function heldLine(d) {
          const held = d.held || [];
          if (held.length === 0) return "";
          const jobs = held.reduce((n, h) => n + h.jobs, 0), bytes = held.reduce((n, h) => n + h.bytes, 0);
          return `<div class="note" id="held-total" data-jobs="${jobs}" data-bytes="${bytes}">held in Redis: ${fmt(jobs)} jobs, ${fmtBytes(bytes)} (` +
            held.map(h => `${esc(h.name)} ${fmt(h.jobs)}`).join(", ") + `)</div>`;
        }
        function fmtBytes(n) {
          n = n || 0;
          return n >= 1048576 ? (n / 1048576).toFixed(1) + " MiB" : n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B";
        }

        // Pause / resume / cancel (only when the server takes them: behind metrics.control_token). A cancel
        // is final, so it asks first. The answer says how many running processes confirmed the change.
        function controlButtons(c) {
          const state = String(c.state || "running");
          if (state.includes("cancelled")) return "";
          const id = esc(c.id);
          const pauseOrResume = state.includes("paused")
            ? `<button class="ctl" data-action="resume" data-campaign="${id}">resume</button>`
            : `<button class="ctl" data-action="pause" data-campaign="${id}">pause</button>`;
          return pauseOrResume + ` <button class="ctl danger" data-action="cancel" data-campaign="${id}">cancel</button>`;
        }
        async function control(campaign, action) {
          if (action === "cancel" && !confirm(`Cancel campaign ${campaign}? None of its jobs not yet sent will be sent. This cannot be undone.`)) return;
          const note = document.getElementById("control-note");
          const post = () => fetch(`/api/campaigns/${encodeURIComponent(campaign)}/${action}`, {method: "POST", headers: controlHeaders()});
          try {
            let res = await post();
            if (res.status === 401) {
              // The read token does not change campaigns: ask once for the control token, kept as the other.
              const t = (prompt("Campaign control needs the control token (metrics.control_token):") || "").trim();
              if (t) {
                sessionStorage.setItem(CONTROL_KEY, t);
                res = await post();
                if (res.status === 401) sessionStorage.removeItem(CONTROL_KEY);
              }
            }
            const text = await res.text();
            let answer = null;
            try { answer = JSON.parse(text); } catch (e) {}
            note.textContent = res.ok && answer
              ? `${campaign}: ${answer.state} (${action} confirmed by ${answer.confirmed} of ${answer.processes} running processes)`
              : `${campaign}: ${action} refused (${res.status}): ${answer && answer.error ? answer.error : text.trim()}`;
          } catch (e) {
            note.textContent = `${campaign}: ${action} failed: ${e}`;
          }
          refresh();
        }
        document.addEventListener("click", ev => {
          const b = ev.target.closest ? ev.target.closest("button.ctl") : null;
          if (b) control(b.dataset.campaign, b.dataset.action);
        });

        function renderConnections(d) {
          if (d.connections.length === 0) { put("connections", `<div class="empty">No connections reported (a run process writes them every 5 s).</div>`); return; }
          put("connections", `<table><tr><th>app</th><th class="num">#</th><th>state</th><th>gateway</th>
            <th class="num">connected for</th><th class="num">sent</th><th class="num">replayed</th><th>last error</th></tr>` +
            d.connections.map(c => { const f = c.fields, st = f.state || "unknown";
              return `<tr class="state-${esc(st)}" data-app="${esc(c.app)}" data-shard="${c.shard}"><td>${esc(c.app)}</td><td class="num">${c.shard}</td>
              <td><span class="dot"></span>${esc(st)}</td><td class="dim">${esc(f.gateway || "–")}</td>
              <td class="num">${st === "connected" ? since(+f.connected_since, d.now) : "–"}</td>
              <td class="num">${fmt(+(f.sent || 0))}</td><td class="num">${fmt(+(f.replayed || 0))}</td>
              <td class="err" title="${esc(f.last_error)}">${esc(f.last_error || "")}</td></tr>`; }).join("") + `</table>`);
        }

        // The operations token (metrics.auth_token), when the server asks for one: taken once from a
        // `#token=` fragment (then removed from the address bar and history) or from the form, kept in this
        // tab's sessionStorage (never in localStorage: it should not outlive the tab), sent as a bearer header.
        const TOKEN_KEY = "apns-pipeline.ops-token";
        function takeTokenFromFragment() {
          const m = /^#(?:.*&)?token=([^&]*)/.exec(location.hash);
          if (!m) return;
          sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
          window.history.replaceState(null, "", location.pathname + location.search);  // `history` is the rate history below
        }
        function authHeaders() {
          const t = sessionStorage.getItem(TOKEN_KEY);
          return t ? {"Authorization": "Bearer " + t} : {};
        }
        // The campaign buttons' token (metrics.control_token): asked for when the server refuses the
        // buttons the page's token; the page's token is tried first (the control token reads too).
        const CONTROL_KEY = "apns-pipeline.control-token";
        function controlHeaders() {
          const t = sessionStorage.getItem(CONTROL_KEY) || sessionStorage.getItem(TOKEN_KEY);
          return t ? {"Authorization": "Bearer " + t} : {};
        }
        function askForToken(wrong) {
          sessionStorage.removeItem(TOKEN_KEY);
          const login = document.getElementById("login");
          login.style.display = "block";
          login.dataset.state = wrong ? "wrong" : "asked";
          const status = document.getElementById("status");
          status.className = "pill down";
          status.textContent = wrong ? "token refused" : "token needed";
          document.getElementById("meta").textContent = "";
        }
        document.getElementById("login-form").addEventListener("submit", e => {
          e.preventDefault();
          const t = document.getElementById("token").value.trim();
          if (!t) return;
          sessionStorage.setItem(TOKEN_KEY, t);
          document.getElementById("token").value = "";
          document.getElementById("login").style.display = "none";
          refresh();
        });
        // Styles of generated elements go through the CSSOM: the Content-Security-Policy (style-src 'self')
        // refuses style attributes written into the markup.
        function put(id, html) {
          const root = document.getElementById(id);
          root.innerHTML = html;
          for (const el of root.querySelectorAll("[data-style]")) {
            for (const decl of el.dataset.style.split(";")) {
              const i = decl.indexOf(":");
              if (i > 0) el.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
            }
            el.removeAttribute("data-style");
          }
        }

        async function refresh() {
          // Waiting for the token: nothing to ask the server until it is given.
          if (document.getElementById("login").style.display === "block") return;
          const hadToken = sessionStorage.getItem(TOKEN_KEY) != null;
          let d;
          try {
            const res = await fetch("/api/dashboard", {cache: "no-store", headers: authHeaders()});
            if (res.status === 401) { askForToken(hadToken); return; }
            d = await res.json();
          } catch (e) {
            d = null;
            document.getElementById("status").className = "pill down";
            document.getElementById("status").textContent = "dashboard unreachable";
            return;
          }
          const banner = document.getElementById("banner");
          banner.style.display = d.error ? "block" : "none";
          banner.textContent = d.error || "";
          const status = document.getElementById("status");
          status.className = d.error ? "pill down" : "pill live";
          status.textContent = d.error ? "Redis unreachable" : "live";
          if (d.error) return;
          const cur = {t: performance.now() / 1000, totals: d.totals, campaigns: Object.fromEntries(d.campaigns.map(c => [c.id, settledOf(c.counters)]))};
          // "now" rates: over the last ~10 s of polls (one poll apart is too jumpy at a 2 s period).
          const prev = history.find(h => cur.t - h.t <= 10) || history[history.length - 1];
          history.push(cur);
          while (history.length > 40) history.shift();
          renderTiles(d, cur, prev);
          renderChart(d);
          renderReasons(d);
          renderCampaigns(d, cur);
          renderConnections(d);
          document.getElementById("meta").textContent = `Redis prefix ${d.prefix} · updated ${new Date(d.now * 1000).toISOString().replace("T", " ").slice(0, 19)} UTC · every 2 s`;
        }
        takeTokenFromFragment();
        refresh();
        setInterval(refresh, 2000);
        """#
}
