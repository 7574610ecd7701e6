// The console's table reader runs in a sandboxed frame (an opaque origin
// with its own Content-Security-Policy): it parses program-made HTML, such
// as a DataFrame's, inert and answers with its tables' cell text. Parsed in
// the console's page the same HTML would break its CSP (a DataFrame has a
// <style> element and style attributes), and nothing of it but text goes
// back.
"use strict";

addEventListener("message", (ev) => {
  if (ev.source !== parent || !ev.data || typeof ev.data.html !== "string") return;
  const doc = new DOMParser().parseFromString(ev.data.html, "text/html");
  const tables = [...doc.querySelectorAll("table")].slice(0, 10).map((t) => [...t.rows].slice(0, 500).map((r) =>
    [...r.cells].map((c) => ({ th: c.tagName === "TH", text: c.textContent.trim(), colspan: c.colSpan, rowspan: c.rowSpan }))));
  // The console's page checks that the answer comes from this frame; the
  // frame's origin is opaque, so no target origin can be named.
  parent.postMessage({ id: ev.data.id, tables }, "*");
});
