// A session's open decisions: gated tool calls waiting for a person's verdict (Approve, or Reject
// with a reason the model reads) and questions (an answer). Read again whenever an event opens or
// closes one; a decision taken elsewhere (the CLI, another browser) disappears the same way.
import { get, post } from "./api.js";
import { h } from "./format.js";

// Events after which the open decisions are read again.
export const DECISION_EVENTS = new Set(["approval_requested", "approval_decided", "ask_user", "run_resumed",
  "run_finished", "run_waiting", "agent_end", "error"]);

export class DecisionList {
  constructor(session) {
    this.session = session;
    this.list = h("ul", { class: "decisions" });
    this.note = h("p", { class: "muted", id: "decisions-note" }, "Nothing waits for you.");
    this.root = h("section", { class: "card", id: "decisions", "aria-label": "Decisions", hidden: true },
      h("h2", {}, "Waiting for you"), this.note, this.list);
  }

  async refresh() {
    const { decisions } = await get(`/api/decisions?session=${encodeURIComponent(this.session)}`);
    this.draw(decisions);
  }

  draw(decisions) {
    const focused = this.root.contains(document.activeElement) ? document.activeElement.id : null;
    this.root.hidden = decisions.length === 0 && !this.root.dataset.decided;
    this.list.replaceChildren(...decisions.map((d) => this.item(d)));
    this.note.hidden = decisions.length > 0;
    if (focused) document.getElementById(focused)?.focus();
  }

  item(d) {
    const key = `decision-${d.id}`;
    const who = h("span", { class: "who" }, (d.path && d.path.length ? d.path.join(" › ") : d.agent) || "a run");
    if (d.kind === "approval") {
      const reason = h("input", { type: "text", id: `${key}-reason`, placeholder: "reason (for Reject)",
        "aria-label": `Reason to reject ${d.tool}` });
      const approve = h("button", { type: "button", id: `${key}-approve`, class: "approve" }, "Approve");
      const reject = h("button", { type: "button", id: `${key}-reject`, class: "danger" }, "Reject");
      const out = h("span", { class: "muted", role: "status" });
      const decide = async (body) => {
        approve.disabled = reject.disabled = true;
        try {
          await post(`/api/decisions/${encodeURIComponent(d.id)}`, { session: d.session, ...body });
          this.root.dataset.decided = "1";
          out.textContent = body.decision === "approve" ? "approved" : "rejected";
          await this.refresh();
        } catch (err) {
          out.textContent = err.message;
          approve.disabled = reject.disabled = false;
        }
      };
      approve.addEventListener("click", () => decide({ decision: "approve" }));
      reject.addEventListener("click", () => decide({ decision: "reject", reason: reason.value }));
      return h("li", { class: "decision", "data-decision-id": d.id, "data-kind": "approval" },
        h("div", {}, who, " wants to run ", h("code", { class: "tool" }, d.tool)),
        h("pre", { class: "text arguments" }, JSON.stringify(d.arguments ?? {}, null, 2)),
        h("div", { class: "actions" }, approve, reject, reason, out));
    }
    const answer = h("input", { type: "text", id: `${key}-answer`, "aria-label": "Your answer" });
    const send = h("button", { type: "button", id: `${key}-send` }, "Answer");
    const out = h("span", { class: "muted", role: "status" });
    send.addEventListener("click", async () => {
      send.disabled = true;
      try {
        await post(`/api/decisions/${encodeURIComponent(d.id)}`, { session: d.session, answer: answer.value });
        await this.refresh();
      } catch (err) { out.textContent = err.message; send.disabled = false; }
    });
    return h("li", { class: "decision", "data-decision-id": d.id, "data-kind": "question" },
      h("div", {}, who, " asks: ", h("span", { class: "question" }, d.text ?? "")),
      (d.options ?? []).length ? h("p", { class: "muted" }, `options: ${d.options.map((o) => o.label ?? o).join(", ")}`) : null,
      h("div", { class: "actions" }, answer, send, out));
  }
}
