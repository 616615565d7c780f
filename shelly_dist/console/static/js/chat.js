// One run's conversation, message by message: texts, tool calls and their results.
import { get } from "./api.js";
import { h } from "./format.js";

function part(p) {
  switch (p.kind) {
    case "text": return h("pre", { class: "text" }, p.text);
    case "tool_call": return h("pre", { class: "call" }, `→ ${p.name}(${p.arguments || ""})`);
    case "tool_result": return h("pre", { class: p.is_error ? "result error" : "result" },
      `← ${p.is_error ? "error: " : ""}${p.content}`);
    case "image": return h("p", { class: "muted" }, `[image ${p.media_type || p.url}]`);
    case "document": return h("p", { class: "muted" }, `[document ${p.path || p.media_type}]`);
    default: return h("p", { class: "muted" }, `[${p.kind}]`);
  }
}

export async function showChat(panel, runId) {
  const chat = await get(`/api/runs/${encodeURIComponent(runId)}/chat`);
  const run = chat.run;
  panel.dataset.run = runId;
  panel.replaceChildren(...[
    h("h2", {}, `Conversation of ${run.instance || run.agent}`),
    h("p", { class: "muted" }, `run ${run.id} · ${run.status}${run.worker ? " on " + run.worker : ""}`),
    chat.complete ? null : h("p", { class: "muted" },
      "Rebuilt from the run's events (in-process): long texts are cut at 2,000 characters."),
    ...chat.messages.map(message),
  ].filter((child) => child !== null));
}

function message(m, i) {
  const title = `${i + 1}. ${m.role}${m.sender && m.sender !== m.role ? " · " + m.sender : ""}`;
  if (m.role === "system") {  // long and the same for every run of an agent: folded
    return h("details", { class: "msg role-system" }, h("summary", {}, `${title} (system prompt)`), ...m.parts.map(part));
  }
  return h("article", { class: `msg role-${m.role}` }, h("header", {}, title), ...m.parts.map(part));
}
