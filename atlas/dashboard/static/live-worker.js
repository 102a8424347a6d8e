// The dashboard's one event stream for every tab of this browser (a SharedWorker).
// A browser allows 6 connections per host over HTTP/1.1: one stream per tab (or per panel)
// would stall every page from a few tabs on. Each tab connects with a MessagePort, gets
// every event as {name, data}, and says "bye" when it goes away; the last one closes it.
"use strict";

// The event names /events sends (atlas/dashboard/events.py); "open" is the stream (re)opening.
const NAMES = ["home", "waiting", "routines", "chat"];
const ports = new Set();
let source = null;

function send(message) {
  for (const port of ports) port.postMessage(message);
}

function openStream() {
  source = new EventSource("/events");
  let opened = false;
  // Reopened after a drop: the tabs refetch, or what changed meanwhile is missed. Not at the
  // first open: a tab was just rendered, and a refetch then would race the first event.
  source.onopen = () => {
    if (opened) send({ name: "open" });
    opened = true;
  };
  for (const name of NAMES) {
    source.addEventListener(name, (event) => send({ name, data: event.data }));
  }
}

onconnect = (connection) => {
  const port = connection.ports[0];
  ports.add(port);
  port.onmessage = (message) => {
    if (message.data !== "bye") return;
    ports.delete(port);
    if (ports.size === 0 && source !== null) {
      source.close();
      source = null;
    }
  };
  // None yet, or closed for good (a 401 after logging out): a new tab opens it again.
  if (source === null || source.readyState === EventSource.CLOSED) openStream();
};
