/// The operator page served at `GET /`: one self-contained HTML document (inline CSS and JavaScript, no CDN,
/// no build step) for broadcast operators during a match. It shows the service's readiness, the live waves as
/// large progress bars (delivered / superseded / failed / expired-or-invalidated of targeted), the channels of
/// the engine (audience, latest timestamp, live waves) and the recent waves as a table.
///
/// It polls `GET /readyz`, `GET /v1/waves` and `GET /v1/channels` every 2 s and follows up to three
/// running waves through `GET /v1/waves/{id}/events`, read with `fetch` rather than `EventSource` so that the
/// API key can go in the `Authorization: Bearer` header. When the API answers 401 or 403 the page asks for a
/// key and keeps it in the tab's session storage. Everything from the API is inserted as text, never as HTML.
package enum OperatorPage {
    package static let html = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Fanfare operator</title>
        <link rel="icon" href="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Ccircle cx='8' cy='8' r='7' fill='%233fb27f'/%3E%3C/svg%3E">
        <style>
        :root {
          color-scheme: dark light;
          --bg: #11151b; --panel: #1a2029; --line: #2c3542; --text: #e6e9ee; --muted: #9aa5b4;
          --delivered: #3fb27f; --superseded: #6f8fcf; --failed: #e5534b; --other: #d4a72c; --track: #2a313c;
          --focus: #8ab4ff; --warn-bg: #3a2a12; --err-bg: #3b1a1a;
        }
        @media (prefers-color-scheme: light) {
          :root {
            --bg: #f4f6f9; --panel: #ffffff; --line: #d8dde5; --text: #17202b; --muted: #566273;
            --delivered: #1f8a5a; --superseded: #4766a8; --failed: #c4312a; --other: #a57a00; --track: #e3e7ed;
            --focus: #1a56db; --warn-bg: #fff4d6; --err-bg: #fde4e2;
          }
        }
        * { box-sizing: border-box; }
        body { margin: 0; background: var(--bg); color: var(--text);
          font: 16px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", sans-serif; }
        .skip { position: absolute; left: -999px; }
        .skip:focus { left: 1rem; top: 1rem; background: var(--panel); padding: .5rem; z-index: 2; }
        header { display: flex; flex-wrap: wrap; align-items: center; gap: .75rem 1.5rem; padding: .9rem 1.5rem;
          border-bottom: 1px solid var(--line); background: var(--panel); }
        header h1 { font-size: 1.25rem; margin: 0; letter-spacing: .02em; }
        .status { display: flex; flex-wrap: wrap; gap: .5rem 1.25rem; color: var(--muted); margin: 0; }
        .status dt { display: inline; }
        .status dd { display: inline; margin: 0 0 0 .3rem; color: var(--text); font-variant-numeric: tabular-nums; }
        .pill { display: inline-block; padding: .1rem .6rem; border-radius: 999px; font-weight: 600; font-size: .9rem; }
        .pill.ok { background: color-mix(in srgb, var(--delivered) 22%, transparent); color: var(--text); }
        .pill.bad { background: color-mix(in srgb, var(--failed) 25%, transparent); color: var(--text); }
        .spacer { flex: 1; }
        main { padding: 1rem 1.5rem 2rem; display: grid; gap: 1.5rem; max-width: 1400px; }
        section > h2 { font-size: 1.05rem; margin: 0 0 .6rem; color: var(--muted); text-transform: uppercase;
          letter-spacing: .06em; }
        .notice { padding: .75rem 1rem; border-radius: 8px; background: var(--warn-bg); border: 1px solid var(--line); }
        .notice.error { background: var(--err-bg); }
        .notice[hidden] { display: none; }
        form.key { display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; margin-top: .5rem; }
        input, button { font: inherit; color: var(--text); background: var(--bg); border: 1px solid var(--line);
          border-radius: 6px; padding: .35rem .6rem; }
        button { cursor: pointer; background: var(--panel); }
        :focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }
        .legend { display: flex; flex-wrap: wrap; gap: .4rem 1.2rem; margin: 0; padding: 0; list-style: none;
          color: var(--muted); font-size: .9rem; }
        .swatch { display: inline-block; width: .85rem; height: .85rem; border-radius: 3px; vertical-align: -2px;
          margin-right: .35rem; }
        .delivered { background: var(--delivered); } .superseded { background: var(--superseded); }
        .failed { background: var(--failed); } .other { background: var(--other); }
        .live { display: grid; gap: 1rem; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); }
        .card { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 1rem 1.1rem; }
        .card h3 { margin: 0; font-size: 1.3rem; overflow-wrap: anywhere; }
        .card .meta { color: var(--muted); margin: .15rem 0 .7rem; }
        .big { display: flex; align-items: center; gap: .8rem; }
        .big .bar { height: 1.4rem; flex: 1; }
        .big .pct { font-size: 1.6rem; font-weight: 700; min-width: 5.5ch; text-align: right; }
        .counts { display: grid; grid-template-columns: repeat(3, 1fr); gap: .4rem; margin: .8rem 0 0; }
        .counts div { min-width: 0; }
        .counts dt { color: var(--muted); font-size: .8rem; }
        .counts dd { margin: 0; font-size: 1.1rem; font-variant-numeric: tabular-nums; }
        .empty { color: var(--muted); margin: 0; }
        .reasons { color: var(--muted); margin: .6rem 0 0; font-size: .9rem; }
        .reasons[hidden] { display: none; }
        td .why { display: block; color: var(--muted); font-size: .8rem; white-space: normal; }
        .bar { display: flex; height: .8rem; min-width: 8rem; border-radius: 4px; overflow: hidden; background: var(--track); }
        .bar span { display: block; height: 100%; transition: width .2s linear; }
        table { width: 100%; border-collapse: collapse; background: var(--panel); border: 1px solid var(--line);
          border-radius: 10px; overflow: hidden; }
        caption { text-align: left; color: var(--muted); padding: 0 0 .4rem; caption-side: top; }
        th, td { padding: .45rem .7rem; text-align: left; border-bottom: 1px solid var(--line); white-space: nowrap; }
        th { color: var(--muted); font-weight: 600; font-size: .85rem; }
        tbody th { color: var(--text); font-size: 1rem; }
        td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
        td.channel { white-space: normal; overflow-wrap: anywhere; font-weight: 600; }
        tbody tr:last-child td { border-bottom: 0; }
        .progress { display: flex; align-items: center; gap: .5rem; }
        .progress .pct { min-width: 5ch; text-align: right; font-variant-numeric: tabular-nums; }
        .state { font-size: .85rem; font-weight: 600; }
        .state.running { color: var(--delivered); } .state.paused, .state.interrupted { color: var(--other); }
        .state.complete { color: var(--muted); }
        .scroll { overflow-x: auto; }
        .muted { color: var(--muted); }
        </style>
        </head>
        <body>
        <a class="skip" href="#live-title">Skip to live waves</a>
        <header>
          <h1>Fanfare</h1>
          <dl class="status" aria-label="Service status">
            <div><dt>Service</dt><dd><span id="ready" class="pill">connecting</span></dd></div>
            <div><dt>Tokens</dt><dd id="tokens">–</dd></div>
            <div><dt>APNs connections</dt><dd id="connections">–</dd></div>
            <div><dt>Updated</dt><dd id="updated">–</dd></div>
          </dl>
          <span class="spacer"></span>
          <button type="button" id="forget" hidden>Forget API key</button>
        </header>
        <main>
          <div id="problem" class="notice error" role="alert" hidden></div>
          <div id="key-panel" class="notice" hidden>
            <p id="key-why" style="margin:0">This service needs an API key with the <strong>read</strong> scope.</p>
            <form class="key" id="key-form">
              <label for="key-input">API key</label>
              <input id="key-input" type="password" autocomplete="off" spellcheck="false" required minlength="16" size="40">
              <button type="submit">Use key</button>
              <span class="muted">Kept in this tab only (session storage).</span>
            </form>
          </div>
          <ul class="legend" aria-label="Colours of the progress bars">
            <li><span class="swatch delivered"></span>Delivered</li>
            <li><span class="swatch superseded"></span>Superseded by a newer update</li>
            <li><span class="swatch failed"></span>Failed</li>
            <li><span class="swatch other"></span>Expired or invalidated</li>
            <li><span class="swatch" style="background:var(--track)"></span>Not yet answered</li>
          </ul>
          <section aria-labelledby="live-title">
            <h2 id="live-title" tabindex="-1">Live waves</h2>
            <div id="live" class="live"></div>
            <p id="live-empty" class="empty">No wave is running.</p>
          </section>
          <section aria-labelledby="channels-title">
            <h2 id="channels-title">Channels</h2>
            <div class="scroll">
              <table id="channels">
                <caption>Channels</caption>
                <thead><tr>
                  <th scope="col">Channel</th><th scope="col" class="num">Update tokens</th>
                  <th scope="col" class="num">Push-to-start tokens</th><th scope="col">Latest update</th>
                  <th scope="col" class="num">Live waves</th>
                </tr></thead>
                <tbody></tbody>
              </table>
            </div>
            <p id="channels-empty" class="empty">No token follows a channel yet.</p>
          </section>
          <section aria-labelledby="recent-title">
            <h2 id="recent-title">Recent waves</h2>
            <div class="scroll">
              <table id="recent">
                <caption>Newest first</caption>
                <thead><tr>
                  <th scope="col" class="num">Wave</th><th scope="col">Channel</th><th scope="col">Event</th>
                  <th scope="col">State</th><th scope="col">Progress</th><th scope="col" class="num">Targeted</th>
                  <th scope="col" class="num">Delivered</th><th scope="col" class="num">Superseded</th>
                  <th scope="col" class="num">Failed</th><th scope="col" class="num">Expired or invalidated</th>
                  <th scope="col" class="num">First answer</th>
                  <th scope="col" class="num">Makespan</th>
                </tr></thead>
                <tbody></tbody>
              </table>
            </div>
            <p id="recent-empty" class="empty">No wave yet.</p>
          </section>
          <p id="announce" class="skip" aria-live="polite"></p>
        </main>
        <script>
        'use strict';
        (() => {
          const KEY = 'fanfare.apiKey';
          const REFRESH_MS = 2000;
          const WAVES_SHOWN = 50;
          const CHANNELS_SHOWN = 30;
          // Each stream holds one HTTP/1.1 connection; the browser allows six per host, so leave room for the rest.
          const MAX_STREAMS = 3;
          const numbers = new Intl.NumberFormat();
          const $ = (id) => document.getElementById(id);

          const state = {
            key: sessionStorage.getItem(KEY) || '',
            waves: new Map(),      // id -> newest WaveReport seen (list or stream)
            order: [],             // wave ids, newest first
            channels: [],          // ChannelSummary, as GET /v1/channels lists them
            streams: new Map()     // wave id -> AbortController
          };

          class AuthError extends Error {
            constructor(status, detail) { super(detail); this.status = status; }
          }

          function headers(accept) {
            const h = { 'Accept': accept };
            if (state.key) h['Authorization'] = 'Bearer ' + state.key;
            return h;
          }

          async function getJSON(path) {
            const response = await fetch(path, { headers: headers('application/json'), cache: 'no-store' });
            if (response.status === 401 || response.status === 403) {
              throw new AuthError(response.status, await problemDetail(response));
            }
            if (!response.ok) {
              const error = new Error(await problemDetail(response));
              error.status = response.status;
              throw error;
            }
            return response.json();
          }

          async function problemDetail(response) {
            try {
              const problem = await response.json();
              if (problem && typeof problem.detail === 'string') return problem.detail;
            } catch (_) { /* not a problem document */ }
            return 'HTTP ' + response.status;
          }

          // ---- Formatting

          const count = (n) => (typeof n === 'number' ? numbers.format(n) : '–');

          function percent(report) {
            if (report.targeted <= 0) return report.state === 'complete' ? 100 : 0;
            if (report.accounted >= report.targeted) return 100;
            return Math.min(99, Math.floor((report.accounted * 100) / report.targeted));
          }

          function seconds(value) {
            if (typeof value !== 'number') return '–';
            if (value < 1) return (value * 1000).toFixed(value < 0.01 ? 2 : 1) + ' ms';
            return value.toFixed(2) + ' s';
          }

          function clock(unixSeconds) {
            return new Date(unixSeconds * 1000).toLocaleTimeString([], { hour12: false });
          }

          function age(unixSeconds) {
            const s = Math.max(0, Math.round(Date.now() / 1000 - unixSeconds));
            if (s < 90) return s + ' s ago';
            if (s < 5400) return Math.round(s / 60) + ' min ago';
            return Math.round(s / 3600) + ' h ago';
          }

          // "Unregistered 3, Unconfirmed 1": the failures of a wave by APNs reason or local cause, most first.
          function reasons(report) {
            return Object.entries(report.failed_by_reason || {}).filter(([, n]) => n > 0)
              .sort((a, b) => b[1] - a[1]).map(([reason, n]) => reason + ' ' + count(n)).join(', ');
          }

          function el(tag, className, text) {
            const node = document.createElement(tag);
            if (className) node.className = className;
            if (text !== undefined) node.textContent = text;
            return node;
          }

          // ---- Progress bars

          function makeBar() {
            const bar = el('div', 'bar');
            bar.setAttribute('role', 'progressbar');
            bar.setAttribute('aria-valuemin', '0');
            for (const kind of ['delivered', 'superseded', 'failed', 'other']) bar.append(el('span', kind));
            return bar;
          }

          function updateBar(bar, pctNode, report) {
            const total = Math.max(report.targeted, 1);
            const parts = {
              delivered: report.delivered, superseded: report.superseded, failed: report.failed,
              other: report.expired + report.invalidated
            };
            for (const span of bar.children) span.style.width = ((parts[span.className] * 100) / total) + '%';
            const p = percent(report);
            bar.setAttribute('aria-valuemax', String(report.targeted));
            bar.setAttribute('aria-valuenow', String(report.accounted));
            bar.setAttribute('aria-valuetext',
              p + ' percent: ' + count(report.delivered) + ' delivered, ' + count(report.superseded) + ' superseded, ' +
              count(report.failed) + ' failed of ' + count(report.targeted));
            pctNode.textContent = p + '\u00a0%';
            pctNode.dataset.percent = String(p);
          }

          // ---- Live wave cards

          const cards = new Map(); // wave id -> {node, parts}

          function card(report) {
            let entry = cards.get(report.id);
            if (!entry) {
              const node = el('article', 'card');
              node.dataset.waveId = String(report.id);
              const title = el('h3');
              const meta = el('p', 'meta');
              const big = el('div', 'big');
              const bar = makeBar();
              const pct = el('span', 'pct');
              big.append(bar, pct);
              const counts = el('dl', 'counts');
              const cells = {};
              for (const [key, label] of [['delivered', 'Delivered'], ['superseded', 'Superseded'], ['failed', 'Failed'],
                ['other', 'Expired or invalidated'], ['left', 'Not yet answered']]) {
                const box = el('div');
                const dd = el('dd');
                box.append(el('dt', null, label), dd);
                counts.append(box);
                cells[key] = dd;
              }
              const reasons = el('p', 'reasons');
              node.append(title, meta, big, counts, reasons);
              title.id = 'wave-title-' + report.id;
              node.setAttribute('aria-labelledby', title.id);
              entry = { node, title, meta, bar, pct, cells, reasons };
              cards.set(report.id, entry);
            }
            entry.title.textContent = report.channel;
            entry.meta.textContent = 'Wave ' + report.id + ' · ' + report.event + ' · ' + report.state +
              ' · ' + count(report.targeted) + ' targeted';
            updateBar(entry.bar, entry.pct, report);
            entry.cells.delivered.textContent = count(report.delivered);
            entry.cells.superseded.textContent = count(report.superseded);
            entry.cells.failed.textContent = count(report.failed);
            entry.cells.other.textContent = count(report.expired + report.invalidated);
            entry.cells.left.textContent = count(Math.max(0, report.targeted - report.accounted));
            const why = reasons(report);
            entry.reasons.textContent = why ? 'Failed: ' + why : '';
            entry.reasons.hidden = !why;
            return entry.node;
          }

          function renderLive() {
            const live = $('live');
            const running = state.order.map((id) => state.waves.get(id)).filter((r) => r && r.state !== 'complete');
            const keep = new Set(running.map((r) => r.id));
            for (const id of [...cards.keys()]) if (!keep.has(id)) { cards.get(id).node.remove(); cards.delete(id); }
            running.forEach((report, index) => {
              const node = card(report);
              if (live.children[index] !== node) live.insertBefore(node, live.children[index] || null);
            });
            $('live-empty').hidden = running.length > 0;
          }

          // ---- Recent waves table

          const rows = new Map(); // wave id -> {row, cells}

          function row(report) {
            let entry = rows.get(report.id);
            if (!entry) {
              const tr = el('tr');
              tr.dataset.waveId = String(report.id);
              const cells = {};
              for (const key of ['id', 'channel', 'event', 'state', 'progress', 'targeted', 'delivered', 'superseded',
                'failed', 'other', 'first', 'makespan']) {
                const td = el(key === 'id' ? 'th' : 'td');
                if (key === 'id') td.scope = 'row';
                if (['id', 'targeted', 'delivered', 'superseded', 'failed', 'other', 'first', 'makespan'].includes(key)) {
                  td.className = 'num';
                }
                if (key === 'channel') td.className = 'channel';
                tr.append(td);
                cells[key] = td;
              }
              const wrap = el('div', 'progress');
              const bar = makeBar();
              const pct = el('span', 'pct');
              wrap.append(bar, pct);
              cells.progress.append(wrap);
              entry = { tr, cells, bar, pct };
              rows.set(report.id, entry);
            }
            const c = entry.cells;
            c.id.textContent = String(report.id);
            c.channel.textContent = report.channel;
            c.event.textContent = report.event;
            c.state.textContent = report.state;
            c.state.className = 'state ' + report.state;
            updateBar(entry.bar, entry.pct, report);
            entry.bar.setAttribute('aria-label', 'Wave ' + report.id);
            c.targeted.textContent = count(report.targeted);
            c.delivered.textContent = count(report.delivered);
            c.superseded.textContent = count(report.superseded);
            const why = reasons(report);
            c.failed.textContent = count(report.failed);
            if (why) c.failed.append(el('span', 'why', why));
            c.other.textContent = count(report.expired + report.invalidated);
            c.first.textContent = seconds(report.time_to_first_ack_seconds);
            c.makespan.textContent = report.state === 'complete' ? seconds(report.makespan_seconds) : '–';
            return entry.tr;
          }

          function renderRecent() {
            const body = $('recent').tBodies[0];
            const shown = state.order.slice(0, WAVES_SHOWN);
            const keep = new Set(shown);
            for (const id of [...rows.keys()]) if (!keep.has(id)) { rows.get(id).tr.remove(); rows.delete(id); }
            shown.forEach((id, index) => {
              const node = row(state.waves.get(id));
              if (body.children[index] !== node) body.insertBefore(node, body.children[index] || null);
            });
            $('recent').hidden = shown.length === 0;
            $('recent-empty').hidden = shown.length > 0;
          }

          // ---- Channels table

          function renderChannels() {
            const body = $('channels').tBodies[0];
            // Channels with live waves first, then the most recently updated, then the largest audience.
            const list = [...state.channels].sort((a, b) =>
              b.live_waves.length - a.live_waves.length ||
              (b.latest_timestamp || 0) - (a.latest_timestamp || 0) ||
              (b.audience.update + b.audience.push_to_start) - (a.audience.update + a.audience.push_to_start) ||
              (a.channel < b.channel ? -1 : 1)).slice(0, CHANNELS_SHOWN);
            $('channels').caption.textContent = state.channels.length > list.length
              ? 'The ' + list.length + ' busiest of ' + count(state.channels.length) + ' channels'
              : count(state.channels.length) + (state.channels.length === 1 ? ' channel' : ' channels');
            const keep = new Set(list.map((summary) => summary.channel));
            for (const name of [...channelRows.keys()]) {
              if (!keep.has(name)) { channelRows.get(name).tr.remove(); channelRows.delete(name); }
            }
            list.forEach((summary, index) => {
              const node = channelRow(summary);
              if (body.children[index] !== node) body.insertBefore(node, body.children[index] || null);
            });
            $('channels').hidden = list.length === 0;
            $('channels-empty').hidden = list.length > 0;
          }

          const channelRows = new Map(); // channel -> {tr, cells}

          function channelRow(summary) {
            let entry = channelRows.get(summary.channel);
            if (!entry) {
              const tr = el('tr');
              tr.dataset.channel = summary.channel;
              const name = el('th', 'channel', summary.channel);
              name.scope = 'row';
              const cells = { update: el('td', 'num'), pushToStart: el('td', 'num'), latest: el('td'), live: el('td', 'num') };
              tr.append(name, cells.update, cells.pushToStart, cells.latest, cells.live);
              entry = { tr, cells };
              channelRows.set(summary.channel, entry);
            }
            const c = entry.cells;
            c.update.textContent = count(summary.audience.update);
            c.pushToStart.textContent = count(summary.audience.push_to_start);
            c.live.textContent = count(summary.live_waves.length);
            if (typeof summary.latest_timestamp === 'number') {
              const time = el('time', null, clock(summary.latest_timestamp));
              time.dateTime = new Date(summary.latest_timestamp * 1000).toISOString();
              c.latest.replaceChildren(time, el('span', 'muted', ' · ' + age(summary.latest_timestamp)));
              c.latest.className = '';
            } else {
              c.latest.textContent = 'none since the service started';
              c.latest.className = 'muted';
            }
            return entry.tr;
          }

          function render() {
            renderLive();
            renderRecent();
            renderChannels();
          }

          // ---- Data

          function accept(report) {
            const known = state.waves.get(report.id);
            // A list answer can be older than the stream's last event: keep whichever has more accounted for.
            if (known && (known.state === 'complete' || known.accounted > report.accounted) && report.state !== 'complete') return;
            if (known && known.state !== 'complete' && report.state === 'complete') {
              $('announce').textContent = 'Wave ' + report.id + ' on ' + report.channel + ' complete: ' +
                count(report.delivered) + ' delivered, ' + count(report.failed) + ' failed.';
            }
            state.waves.set(report.id, report);
          }

          async function loadWaves() {
            const page = await getJSON('/v1/waves?limit=' + WAVES_SHOWN);
            for (const report of page.waves) accept(report);
            state.order = page.waves.map((r) => r.id);
            for (const id of [...state.waves.keys()]) if (!state.order.includes(id)) state.waves.delete(id);
          }

          async function loadChannels() {
            state.channels = (await getJSON('/v1/channels')).channels;
          }

          async function loadReadiness() {
            const ready = $('ready');
            try {
              const response = await fetch('/readyz', { headers: { 'Accept': 'application/json' }, cache: 'no-store' });
              const body = await response.json().catch(() => null);
              if (response.ok && body) {
                ready.textContent = 'ready';
                ready.className = 'pill ok';
                $('tokens').textContent = count(body.tokens);
                $('connections').textContent = count(body.apns_connections);
              } else {
                ready.textContent = body && body.code === 'shutting_down' ? 'shutting down' : 'not ready';
                ready.className = 'pill bad';
              }
            } catch (_) {
              ready.textContent = 'unreachable';
              ready.className = 'pill bad';
            }
          }

          // ---- Wave event streams (fetch, not EventSource, so the Authorization header can be sent)

          function follow(id) {
            const controller = new AbortController();
            state.streams.set(id, controller);
            stream(id, controller.signal)
              .catch((error) => { if (error.name !== 'AbortError') console.info('wave ' + id + ' events ended: ' + error.message); })
              .finally(() => { if (state.streams.get(id) === controller) state.streams.delete(id); });
          }

          async function stream(id, signal) {
            const response = await fetch('/v1/waves/' + id + '/events', {
              headers: headers('text/event-stream'), cache: 'no-store', signal
            });
            if (!response.ok || !response.body) {
              await response.body?.cancel();
              return;
            }
            const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
            let buffer = '';
            for (;;) {
              const { value, done } = await reader.read();
              if (done) return;
              buffer = (buffer + value).replace(/\r\n?/g, '\n');
              let end;
              while ((end = buffer.indexOf('\n\n')) >= 0) {
                const block = buffer.slice(0, end);
                buffer = buffer.slice(end + 2);
                let name = 'message';
                const data = [];
                for (const line of block.split('\n')) {
                  if (line.startsWith('event:')) name = line.slice(6).trim();
                  else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
                }
                if ((name === 'progress' || name === 'complete') && data.length > 0) {
                  accept(JSON.parse(data.join('\n')));
                  renderLive();
                  renderRecent();
                }
                if (name === 'complete' || name === 'shutdown') {
                  reader.cancel().catch(() => {});
                  return;
                }
              }
            }
          }

          function followRunning() {
            const running = state.order.filter((id) => state.waves.get(id).state !== 'complete');
            const wanted = new Set(running.slice(0, MAX_STREAMS));
            for (const [id, controller] of state.streams) if (!wanted.has(id)) { controller.abort(); state.streams.delete(id); }
            for (const id of wanted) if (!state.streams.has(id)) follow(id);
          }

          // ---- Refresh loop and key handling

          function showProblem(text) {
            $('problem').textContent = text || '';
            $('problem').hidden = !text;
          }

          function askForKey(error) {
            $('key-panel').hidden = false;
            $('key-why').textContent = error.status === 403
              ? 'This API key cannot read waves and channels (' + error.message + '). Give a key with the read scope.'
              : (state.key ? 'The service did not accept this API key (' + error.message + ').'
                : 'This service needs an API key with the read scope.');
            for (const controller of state.streams.values()) controller.abort();
            state.streams.clear();
          }

          let timer = 0;
          async function refresh() {
            clearTimeout(timer);
            await loadReadiness();
            try {
              await loadWaves();
              await loadChannels();
              $('key-panel').hidden = true;
              showProblem('');
              render();
              followRunning();
              $('updated').textContent = new Date().toLocaleTimeString([], { hour12: false });
            } catch (error) {
              if (error instanceof AuthError) askForKey(error);
              else showProblem('Could not read the service: ' + error.message + '. Retrying.');
            }
            $('forget').hidden = !state.key;
            timer = setTimeout(refresh, REFRESH_MS);
          }

          $('key-form').addEventListener('submit', (event) => {
            event.preventDefault();
            state.key = $('key-input').value.trim();
            $('key-input').value = '';
            sessionStorage.setItem(KEY, state.key);
            refresh();
          });

          $('forget').addEventListener('click', () => {
            sessionStorage.removeItem(KEY);
            state.key = '';
            refresh();
          });

          refresh();
        })();
        </script>
        </body>
        </html>
        """#
}
