// The list of sessions, newest first, with a form to start one; rows refresh as events arrive.
import { debounce, follow, get, post } from "./api.js";
import { cost, duration, h, status, tokens, when } from "./format.js";

const PAGE = 50;

function row(s) {
  const link = h("a", { href: `/sessions/${encodeURIComponent(s.id)}` }, s.id);
  return h("tr", { "data-session": s.id },
    h("td", {}, link),
    h("td", {}, status(s.status)),
    h("td", {}, s.agent),
    h("td", { class: "task", title: s.task }, s.task),
    h("td", {}, when(s.created)),
    h("td", { class: "num" }, duration(s.created, s.ended)),
    h("td", { class: "num" }, tokens(s.tree.total_tokens)),
    h("td", { class: "num" }, cost(s.tree.cost_usd)));
}

function startForm(onStarted) {
  const task = h("textarea", { id: "new-task", rows: 2, required: true, placeholder: "What should the team do?" });
  const agent = h("input", { id: "new-agent", placeholder: "entry agent" });
  const context = h("textarea", { id: "new-context", rows: 1, placeholder: "optional background" });
  const error = h("p", { class: "error", role: "alert" });
  const form = h("form", { class: "card start" },
    h("h2", {}, "New session"),
    h("label", { for: "new-task" }, "Task"), task,
    h("label", { for: "new-agent" }, "Agent"), agent,
    h("label", { for: "new-context" }, "Context"), context,
    h("div", {}, h("button", { type: "submit" }, "Start")), error);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    error.textContent = "";
    try {
      const started = await post("/api/sessions", {
        task: task.value, agent: agent.value.trim() || null, context: context.value });
      onStarted(started.session);
    } catch (err) {
      error.textContent = err.message;
    }
  });
  return form;
}

export async function sessionsPage(app) {
  const body = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "Older sessions");
  let cursor = null;
  let shown = PAGE;

  const load = async (append) => {
    const query = append && cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
    const page = await get(`/api/sessions?limit=${append ? PAGE : shown}${query}`);
    const rows = page.sessions.map(row);
    if (append) { body.append(...rows); shown += page.sessions.length; } else body.replaceChildren(...rows);
    cursor = page.next;
    more.hidden = !cursor;
    if (!body.children.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No sessions yet.")));
  };
  more.addEventListener("click", () => load(true));

  await load(false);
  const table = h("table", { class: "sessions" },
    h("caption", {}, "Sessions, newest first"),
    h("thead", {}, h("tr", {}, ...["Session", "Status", "Agent", "Task", "Started", "Took", "Tokens", "Cost"]
      .map((t) => h("th", { scope: "col" }, t)))),
    body);
  app.replaceChildren(
    h("h1", {}, "Sessions"),
    startForm((id) => { location.href = `/sessions/${encodeURIComponent(id)}`; }),
    table, more);
  // Any run starting or ending may change a row: reload the rows shown (at most once a second).
  const reload = debounce(() => load(false), 1000);
  follow("/api/events", (event) => {
    if (["run_started", "run_finished", "agent_end", "error"].includes(event.kind)) reload();
  });
}
