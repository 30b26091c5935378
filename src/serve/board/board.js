// The board of `redlock-run serve`: draws /api/locks (index.html) or /api/locks/NAME
// (lock.html) and reads it again every second, without a reload.
//
// Every string that comes from the API (lock names, hosts, labels, programs, reasons) is
// put on the page as a text node or an attribute value, never parsed as HTML: a lock named
// `<img src=x onerror=alert(1)>` shows as those characters. There is no innerHTML here.
//
// Hooks the browser test reads: each lock's row is `[data-lock="NAME"]`, its state cell
// `[data-field="state"]` (text starting with free, held, shared or slots); the page's state
// is `[data-status]` (loading, ok, redis-unreachable, server-gone, error, not-found).
"use strict";

(function () {
  const EVERY_MS = 1000;
  const TIMEOUT_MS = 5000;
  const page = document.body.dataset.page;

  // el("td", {class: "x"}, "text", node, …): an element whose string children are text.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(name, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function duration(ms) {
    if (typeof ms !== "number" || !isFinite(ms)) return "?";
    if (ms < 10000) return (Math.max(0, ms) / 1000).toFixed(1) + "s";
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }

  function iso(ms) {
    return typeof ms === "number" ? new Date(ms).toISOString().replace(".000Z", "Z") : "";
  }

  // "3m 10s ago", by the server's clock (`now` is its read_at_ms).
  function ago(ms, now) {
    return el("time", { datetime: iso(ms), title: iso(ms) }, duration(now - ms) + " ago");
  }

  function who(run) {
    const parts = [];
    if (run.host !== undefined && run.host !== null) parts.push(run.host);
    if (run.pid !== undefined && run.pid !== null) parts.push("pid " + run.pid);
    if (run.program) parts.push("`" + run.program + "`");
    if (run.label) parts.push("(" + run.label + ")");
    return parts.length ? parts.join(" ") : "unknown";
  }

  function stateText(lock) {
    const holders = (lock.holders || []).length;
    switch (lock.state) {
      case "free":
        return "free";
      case "held":
        return "held";
      case "shared":
        return "shared by " + holders + (holders === 1 ? " holder" : " holders");
      case "slots":
        return "slots: " + holders + " of " + lock.limit + " held";
      default:
        return String(lock.state);
    }
  }

  function holdersCell(lock) {
    const holders = lock.holders || [];
    if (!holders.length) return "—";
    return el("ul", { class: "plain" }, holders.map((h) =>
      el("li", {}, who(h), " ", el("span", { class: "dim" }, "for " + duration(h.held_for_ms)),
        h.mode === "shared" ? el("span", { class: "dim" }, " · " + h.mode) : null)));
  }

  function waitingCell(lock, now) {
    const queue = lock.queue || [];
    if (queue.length) {
      return el("ol", { class: "queue" }, queue.map((w) =>
        el("li", {}, w.host !== undefined || w.pid !== undefined ? who(w) : "a run",
          typeof w.since_ms === "number"
          ? el("span", { class: "dim" }, " waiting " + duration(now - w.since_ms)) : null)));
    }
    const n = lock.waiters || 0;
    return n ? n + (n === 1 ? " waiter" : " waiters") : "none";
  }

  const TONE = {
    lost: "bad", expired: "bad", forced: "bad", abandoned: "bad",
    busy: "warn", timeout: "warn", superseded: "warn", replaced: "warn",
    acquired: "good", released: "good", already_done: "good",
  };

  function eventTone(ev) {
    if (ev.event === "released" && typeof ev.exit_code === "number" && ev.exit_code !== 0) return "warn";
    return TONE[ev.event] || "";
  }

  function eventDetails(ev) {
    const parts = [];
    if (typeof ev.exit_code === "number") parts.push("exit " + ev.exit_code);
    if (typeof ev.waited_ms === "number") parts.push("waited " + duration(ev.waited_ms));
    if (typeof ev.held_ms === "number") parts.push("held " + duration(ev.held_ms));
    if (ev.by) parts.push("by " + ev.by);
    return parts.join(", ");
  }

  function eventsCell(events, now) {
    if (!events || !events.length) return "—";
    return el("ul", { class: "events" }, events.slice().reverse().map((ev) =>
      el("li", {},
        el("span", { class: "ev " + eventTone(ev) }, ev.event === null ? "?" : String(ev.event)), " ",
        typeof ev.time_ms === "number" ? ago(ev.time_ms, now) : null, " ",
        el("span", { class: "dim" }, [who(ev), eventDetails(ev)].filter(Boolean).join(", ")))));
  }

  function lockRow(lock, now, linked) {
    const name = String(lock.name);
    const skips = lock.consecutive_skips || 0;
    return el("tr", { "data-lock": name, class: "state-" + lock.state },
      el("th", { scope: "row", "data-label": "lock" },
        linked ? el("a", { href: "/lock/" + (lock.path || encodeURIComponent(name)) }, name) : name),
      el("td", { "data-label": "state", "data-field": "state" },
        el("span", { class: "badge " + lock.state }, stateText(lock))),
      el("td", { "data-label": "held by", "data-field": "holders" }, holdersCell(lock)),
      el("td", { "data-label": "waiting", "data-field": "waiting" }, waitingCell(lock, now)),
      el("td", { "data-label": "last success", "data-field": "last-success" },
        typeof lock.last_success_ms === "number" ? ago(lock.last_success_ms, now) : "never"),
      el("td", { "data-label": "skips", "data-field": "skips", class: skips ? "warn" : "" }, String(skips)),
      el("td", { "data-label": "latest events", "data-field": "events" }, eventsCell(lock.events, now)));
  }

  function setStatus(state, text) {
    const status = document.getElementById("status");
    status.dataset.status = state;
    status.textContent = text;
    document.body.classList.toggle("stale", state !== "ok" && state !== "loading");
  }

  function drawBoard(data) {
    const now = typeof data.read_at_ms === "number" ? data.read_at_ms : Date.now();
    const locks = data.locks || [];
    document.querySelector("#locks tbody").replaceChildren(...locks.map((l) => lockRow(l, now, true)));
    document.getElementById("empty").hidden = locks.length > 0;
    const note = document.getElementById("note");
    note.hidden = !data.truncated;
    note.textContent = data.truncated ? "Only the first " + locks.length + " locks are shown." : "";
    const held = locks.filter((l) => l.state !== "free").length;
    setStatus("ok", "live · " + locks.length + (locks.length === 1 ? " lock" : " locks") + ", " + held +
      " held · prefix " + (data.prefix || "") + " · read " + iso(now));
  }

  // A counter as a reader wants it: times as times, durations as durations.
  function counter(name, value) {
    if (value === null || value === undefined) return "—";
    if (typeof value !== "number" || !/_ms(_sum)?$/.test(name)) return String(value);
    return value > 1e12 ? iso(value) : duration(value);
  }

  function drawLock(data) {
    const now = typeof data.read_at_ms === "number" ? data.read_at_ms : Date.now();
    document.getElementById("name").textContent = String(data.name);
    document.title = "redlock-run: " + data.name;
    document.querySelector("#locks tbody").replaceChildren(lockRow(data, now, false));
    const counters = data.counters || {};
    document.getElementById("counters").replaceChildren(...Object.keys(counters).map((k) =>
      el("div", { "data-counter": k }, el("dt", {}, k), el("dd", {}, counter(k, counters[k])))));
    const history = (data.history || []).slice().reverse();
    document.querySelector("#history tbody").replaceChildren(...(history.length ? history.map((ev) =>
      el("tr", { "data-event": ev.event === null ? "" : String(ev.event) },
        el("td", { "data-label": "time" }, el("time", { datetime: iso(ev.time_ms) }, iso(ev.time_ms))),
        el("td", { "data-label": "event" }, el("span", { class: "ev " + eventTone(ev) },
          ev.event === null ? "?" : String(ev.event))),
        el("td", { "data-label": "fence" }, ev.fence === undefined ? "" : String(ev.fence)),
        el("td", { "data-label": "run" }, who(ev)),
        el("td", { "data-label": "details" }, eventDetails(ev))))
      : [el("tr", {}, el("td", { colspan: 5 }, "No events recorded."))]));
    setStatus("ok", "live · read " + iso(now));
  }

  // The reason a failed answer gives: {"error": …} or its text.
  async function reason(response) {
    const text = await response.text();
    try {
      const body = JSON.parse(text);
      return String(body.error || body.reason || text);
    } catch (_) {
      return text.trim() || response.statusText;
    }
  }

  const lockPath = page === "lock" ? location.pathname.slice("/lock/".length) : "";
  const url = page === "lock" ? "/api/locks/" + lockPath : "/api/locks";
  if (page === "lock") {
    let name = lockPath;
    try { name = decodeURIComponent(lockPath); } catch (_) { /* shown as it came */ }
    document.getElementById("name").textContent = name;
  }

  async function poll() {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), TIMEOUT_MS);
    try {
      let response;
      try {
        response = await fetch(url, { cache: "no-store", signal: abort.signal });
      } catch (_) {
        setStatus("server-gone", "server gone: no answer from redlock-run serve; retrying");
        return;
      }
      if (response.status === 404 && page === "lock") {
        setStatus("not-found", "not found: " + (await reason(response)));
      } else if (response.status === 503) {
        setStatus("redis-unreachable", "Redis unreachable: " + (await reason(response)));
      } else if (!response.ok) {
        setStatus("error", "error " + response.status + ": " + (await reason(response)));
      } else {
        const data = await response.json();
        if (page === "lock") drawLock(data); else drawBoard(data);
      }
    } catch (err) {
      setStatus("error", "cannot read the answer: " + err + "; retrying");
    } finally {
      clearTimeout(timer);
      setTimeout(poll, EVERY_MS);
    }
  }

  poll();
})();
