// Placeholder: the board's own script replaces this file. Every text from the server goes
// through textContent, never innerHTML.
"use strict";
function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  row.appendChild(td);
}
async function board() {
  const status = document.getElementById("status");
  try {
    const answer = await fetch("/api/locks", { cache: "no-store" });
    const data = await answer.json();
    const body = document.querySelector("#locks tbody");
    body.replaceChildren();
    for (const lock of data.locks) {
      const row = document.createElement("tr");
      const holder = lock.holders[0] || {};
      cell(row, lock.name);
      cell(row, lock.state);
      cell(row, holder.host ? holder.host + ":" + holder.pid : "");
      cell(row, holder.held_for_ms);
      cell(row, lock.waiters);
      cell(row, lock.last_success_ms);
      cell(row, lock.consecutive_skips);
      body.appendChild(row);
    }
    status.textContent = "";
  } catch (err) {
    status.textContent = "cannot read /api/locks: " + err;
  }
}
async function lock() {
  const name = decodeURIComponent(location.pathname.slice("/lock/".length));
  document.getElementById("name").textContent = name;
  const status = document.getElementById("status");
  try {
    const answer = await fetch("/api/locks/" + encodeURIComponent(name), { cache: "no-store" });
    const data = await answer.json();
    document.getElementById("counters").textContent = JSON.stringify(data.counters, null, 1);
    const body = document.querySelector("#history tbody");
    body.replaceChildren();
    for (const event of data.history || []) {
      const row = document.createElement("tr");
      cell(row, event.time);
      cell(row, event.event);
      cell(row, event.host);
      cell(row, event.pid);
      cell(row, event.label);
      body.appendChild(row);
    }
    status.textContent = "";
  } catch (err) {
    status.textContent = "cannot read the lock: " + err;
  }
}
const page = document.body.dataset.page === "lock" ? lock : board;
page();
setInterval(page, 2000);
