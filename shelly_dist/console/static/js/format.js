// Small formatting helpers and a DOM builder, shared by the pages.

// h("tr", {class: "x", onclick: f}, child, "text") -> an element; null/false children are skipped.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// A status as a symbol and a word, so it reads the same without colour.
const SYMBOLS = { queued: "○", running: "▶", waiting: "‖", done: "✔", failed: "✗", canceled: "⊘" };

export function status(value) {
  return h("span", { class: `status status-${value}`, "data-status": value },
    h("span", { "aria-hidden": "true" }, SYMBOLS[value] ?? "?"), " ", value);
}

export const ENDED = new Set(["done", "failed", "canceled"]);

export function when(seconds) {
  if (!seconds) return "–";
  const d = new Date(seconds * 1000);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString() : d.toLocaleString();
}

export function duration(from, to) {
  if (!from) return "–";
  const s = Math.max(0, Math.round((to || Date.now() / 1000) - from));
  return s < 60 ? `${s}s` : s < 3600 ? `${Math.floor(s / 60)}m${s % 60}s` : `${Math.floor(s / 3600)}h${Math.floor(s % 3600 / 60)}m`;
}

export function tokens(n) {
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e4 ? `${Math.round(n / 1e3)}k` : String(n ?? 0);
}

export function cost(usd) {
  return `$${(usd ?? 0).toFixed(usd >= 1 ? 2 : 4)}`;
}
