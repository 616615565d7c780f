// The console's entry: picks the page from the address, and asks for the token when the API wants one.
import { Unauthorized, get, post } from "./api.js";
import { h } from "./format.js";
import { sessionsPage } from "./sessions.js";
import { sessionPage } from "./session.js";

const app = document.getElementById("app");

function loginForm() {
  const input = h("input", { id: "token", type: "password", autocomplete: "current-password", required: true });
  const error = h("p", { class: "error", role: "alert" });
  const form = h("form", { id: "login", class: "card" },
    h("h1", {}, "Token required"),
    h("p", {}, "This console needs the server's token (SHELLY_SERVE_TOKEN). It is kept in a cookie for this site."),
    h("label", { for: "token" }, "Token "), input, " ",
    h("button", { type: "submit" }, "Log in"), error);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await post("/api/login", { token: input.value });
      location.reload();
    } catch (err) {
      error.textContent = err.message;
    }
  });
  app.replaceChildren(form);
  input.focus();
}

async function route() {
  const match = location.pathname.match(/^\/sessions\/([^/]+)\/?$/);
  try {
    const health = await get("/api/health");
    document.getElementById("backend").textContent = `backend: ${health.backend}`;
    if (match) await sessionPage(app, decodeURIComponent(match[1]));
    else await sessionsPage(app);
  } catch (err) {
    if (err instanceof Unauthorized) loginForm();
    else app.replaceChildren(h("p", { class: "error", role: "alert" }, err.message));
  }
}

route();
