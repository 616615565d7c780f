// The live run tree: one row per run (an agent instance), children nested under their parent.
// Rows are updated in place, so focus and scroll survive a refresh while runs come and go.
import { cost, duration, h, status, tokens } from "./format.js";

export class RunTree {
  constructor(onOpen) {
    this.onOpen = onOpen;
    this.root = h("ul", { id: "tree", class: "tree", role: "list" });
    this.items = new Map(); // run id -> {li, line, children}
    this.activity = new Map(); // run id -> what it is doing now (from events)
    this.rows = [];
  }

  item(run) {
    let item = this.items.get(run.id);
    if (!item) {
      const open = h("button", { type: "button", class: "open", onclick: () => this.onOpen(run.id) });
      const line = h("div", { class: "run" });
      const children = h("ul", { role: "list" });
      const li = h("li", { "data-run-id": run.id }, line, children);
      item = { li, line, open, children };
      this.items.set(run.id, item);
    }
    return item;
  }

  // Draw `rows` (the /runs answer: roots first, then by depth): each under its parent, in order.
  update(rows) {
    this.rows = rows;
    this.quiet = quietRuns(rows);
    const present = new Set(rows.map((r) => r.id));
    for (const [id, item] of this.items) if (!present.has(id)) { item.li.remove(); this.items.delete(id); }
    for (const run of rows) {
      const item = this.item(run);
      this.draw(item, run);
      const parent = run.parent && this.items.get(run.parent);
      (parent ? parent.children : this.root).append(item.li); // append moves it to its place in order
    }
  }

  // Only the runs that need a look: hide every finished subtree with nothing failed in it.
  setOnlyUnfinished(on) {
    this.onlyUnfinished = on;
    for (const [id, item] of this.items) item.li.hidden = on && this.quiet.has(id);
  }

  draw(item, run) {
    item.li.dataset.status = run.status;
    item.li.hidden = Boolean(this.onlyUnfinished && this.quiet?.has(run.id));
    item.li.classList.toggle("ended", ["done", "failed", "canceled"].includes(run.status));
    const name = run.instance || run.agent;
    item.open.textContent = name;
    item.open.setAttribute("aria-label", `${name}, ${run.status}: show its conversation`);
    const now = run.status === "running" || run.status === "waiting" ? this.activity.get(run.id) : null;
    const hasChildren = this.rows.some((r) => r.parent === run.id);
    item.line.replaceChildren(...[
      item.open, " ", status(run.status),
      h("span", { class: "worker", title: "worker" }, run.worker || "–"),
      h("span", { class: "num", title: "tokens (own)" }, `${tokens(run.own.total_tokens)} tok`),
      h("span", { class: "num", title: "cost (own)" }, cost(run.own.cost_usd)),
      hasChildren ? h("span", { class: "num subtree", title: "tokens and cost of its subtree" },
        `tree ${tokens(run.tree.total_tokens)} tok ${cost(run.tree.cost_usd)}`) : null,
      h("span", { class: "num", title: "time" }, duration(run.created, run.ended)),
      run.spawned ? h("span", { class: "tag" }, "spawned") : null,
      run.handoff ? h("span", { class: "tag" }, `handed off`) : null,
      now ? h("span", { class: "now" }, now) : null,
      run.error ? h("span", { class: "reason", role: "note" }, `reason: ${run.error}`) : null,
    ].filter((child) => child !== null));
  }

  // What a running run is doing, from its events; shown beside it until the next refresh.
  note(event) {
    const d = event.data || {};
    const text = event.kind === "tool_call_start" ? `calling ${d.tool}`
      : event.kind === "message_added" && d.role === "assistant" ? (d.tool_calls?.length ? "model replied" : "answered")
      : event.kind === "run_waiting" ? `waiting on ${d.waiting_on}`
      : event.kind === "ask_user" ? "asks you a question" : null;
    if (!text || !event.run_id) return;
    this.activity.set(event.run_id, text);
    const item = this.items.get(event.run_id);
    const run = this.rows.find((r) => r.id === event.run_id);
    if (item && run) this.draw(item, run);
  }

  counts() {
    const by = {};
    for (const r of this.rows) by[r.status] = (by[r.status] || 0) + 1;
    const order = ["running", "waiting", "queued", "done", "failed", "canceled"];
    return `${this.rows.length} runs: ` + order.filter((s) => by[s]).map((s) => `${by[s]} ${s}`).join(", ");
  }
}

// The ids of runs that ended `done` with every descendant `done` too (nothing to look at).
function quietRuns(rows) {
  const children = new Map();
  for (const r of rows) children.set(r.parent, [...(children.get(r.parent) || []), r]);
  const quiet = new Set();
  const visit = (run) => {
    const kids = children.get(run.id) || [];
    const allKids = kids.map(visit).every(Boolean);
    const isQuiet = run.status === "done" && allKids;
    if (isQuiet) quiet.add(run.id);
    return isQuiet;
  };
  for (const root of children.get("") || []) visit(root);
  return quiet;
}
