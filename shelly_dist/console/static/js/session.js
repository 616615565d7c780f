// One session: its status and reply, Cancel, the live run tree, a run's conversation, the activity.
import { debounce, follow, get, post } from "./api.js";
import { showChat } from "./chat.js";
import { DECISION_EVENTS, DecisionList } from "./decisions.js";
import { ENDED, cost, duration, h, status, tokens, when } from "./format.js";
import { RunTree } from "./tree.js";

// Events after which the tree is read again (a run appeared, moved on or ended).
const STRUCTURAL = new Set(["run_queued", "run_started", "run_spawned", "run_waiting", "run_resumed",
  "run_finished", "agent_end", "error", "spawn_announced"]);
const ACTIVITY_KEPT = 40;

export async function sessionPage(app, id) {
  const base = `/api/sessions/${encodeURIComponent(id)}`;
  const summary = h("dl", { class: "summary" });
  const cancel = h("button", { type: "button", id: "cancel", class: "danger" }, "Cancel session");
  const live = h("span", { id: "live", class: "muted" }, "connecting…");
  const counts = h("p", { id: "counts", class: "muted" });
  const onlyOpen = h("input", { type: "checkbox", id: "only-open" });
  onlyOpen.addEventListener("change", () => tree.setOnlyUnfinished(onlyOpen.checked));
  const filter = h("label", { for: "only-open", class: "filter" }, onlyOpen, " hide finished subtrees");
  const chat = h("section", { id: "chat", class: "card chat", "aria-label": "Conversation", tabindex: -1 },
    h("p", { class: "muted" }, "Choose a run in the tree to read its conversation."));
  const activity = h("ol", { id: "activity", class: "activity", reversed: true });
  const decisions = new DecisionList(id);
  const tree = new RunTree(async (runId) => {
    try { await showChat(chat, runId); chat.focus(); } catch (err) { chat.replaceChildren(h("p", { class: "error" }, err.message)); }
  });

  const drawSummary = (s) => {
    document.title = `${s.agent} · ${s.status} · shelly`;
    const field = (name, value, attrs = {}) => [h("dt", {}, name), h("dd", attrs, value)];
    summary.replaceChildren(
      ...field("Status", status(s.status), { id: "session-status", "data-status": s.status }),
      ...field("Agent", s.agent), ...field("Task", s.task, { class: "task-full" }),
      ...field("Started", when(s.created)), ...field("Took", duration(s.created, s.ended)),
      ...field("Spent", `${tokens(s.tree.total_tokens)} tokens, ${cost(s.tree.cost_usd)}`),
      ...(s.reply ? field("Reply", h("pre", { class: "text" }, s.reply), { id: "reply" }) : []),
      ...(s.error ? field("Error", s.error, { class: "reason" }) : []));
    cancel.disabled = ENDED.has(s.status);
  };

  const refresh = async () => {
    const [s, runs] = await Promise.all([get(base), get(`${base}/runs`)]);
    drawSummary(s);
    tree.update(runs.runs);
    counts.textContent = tree.counts();
    if (chat.dataset.run && !chat.contains(document.activeElement)) {
      await showChat(chat, chat.dataset.run).catch(() => {});
    }
  };
  await refresh();
  await decisions.refresh().catch((err) => { live.textContent = err.message; });

  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    try { await post(`${base}/cancel`); } catch (err) { live.textContent = err.message; cancel.disabled = false; }
    await refresh();
  });

  app.replaceChildren(
    h("p", {}, h("a", { href: "/" }, "← all sessions")),
    h("h1", {}, "Session ", h("code", {}, id)),
    h("section", { class: "card" }, summary, h("div", { class: "actions" }, cancel, " ", live)),
    decisions.root,
    h("div", { class: "split" },
      h("section", { class: "card", "aria-label": "Run tree" }, h("h2", {}, "Agents"), counts, filter, tree.root),
      chat),
    h("section", { class: "card", "aria-label": "Activity" }, h("h2", {}, "Activity"), activity));

  const reload = debounce(() => refresh().catch((err) => { live.textContent = err.message; }), 300);
  const reloadDecisions = debounce(() => decisions.refresh().catch((err) => { live.textContent = err.message; }), 200);
  follow(`${base}/events`, (event) => {
    tree.note(event);
    const who = event.agent || "session";
    const what = event.data?.tool || event.data?.status || event.data?.role || "";
    activity.prepend(h("li", {}, h("time", {}, new Date(event.timestamp * 1000).toLocaleTimeString()), " ",
      who, " ", h("span", { class: "kind" }, event.kind.replaceAll("_", " ")), what ? ` ${what}` : ""));
    while (activity.children.length > ACTIVITY_KEPT) activity.lastChild.remove();
    if (STRUCTURAL.has(event.kind)) reload();
    if (DECISION_EVENTS.has(event.kind)) reloadDecisions();
  }, (state) => { live.textContent = state === "live" ? "● live" : state; });
}
