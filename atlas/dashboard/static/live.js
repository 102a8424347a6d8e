// Live parts of a page: one event stream per browser, shared by its tabs through
// /static/live-worker.js; where SharedWorker is missing (some phone browsers), this tab opens
// its own, still one for all of its live parts. A part refetches itself on
// hx-trigger="live:<name> from:body"; the Chat page's log and draft (data-chat, data-part)
// get their HTML straight from the stream. See atlas/dashboard/events.py.
"use strict";
(function () {
  const NAMES = ["home", "waiting", "routines", "chat"]; // as in live-worker.js

  function deliver(name, data) {
    if (name === "chat") {
      const said = JSON.parse(data);
      for (const target of document.querySelectorAll("[data-chat][data-part]")) {
        if (target.dataset.chat !== said.bot || target.dataset.part !== said.part) continue;
        if (said.part !== "message") target.innerHTML = said.html;
        else {
          target.insertAdjacentHTML("beforeend", said.html);
          // A finished reply's folded calls load their stored results (hx-trigger="load"):
          // htmx sees only what it swapped in itself unless told.
          if (window.htmx && target.lastElementChild) window.htmx.process(target.lastElementChild);
        }
      }
      return;
    }
    document.body.dispatchEvent(new CustomEvent("live:" + name));
  }

  function start() {
    const live = document.querySelector('[hx-trigger*="live:"], [data-chat]');
    if (live === null) return; // nothing here to keep up to date: no stream
    if (typeof SharedWorker === "function") {
      const worker = new SharedWorker("/static/live-worker.js", { name: "atlas-events" });
      worker.port.onmessage = (message) => deliver(message.data.name, message.data.data);
      worker.port.start();
      window.addEventListener("pagehide", () => worker.port.postMessage("bye"));
      return;
    }
    const source = new EventSource("/events");
    let opened = false;
    source.onopen = () => {
      if (opened) deliver("open"); // reopened after a drop, as in live-worker.js
      opened = true;
    };
    for (const name of NAMES) source.addEventListener(name, (event) => deliver(name, event.data));
    window.addEventListener("pagehide", () => source.close());
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
