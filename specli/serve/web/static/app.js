// The chat page: conversations, the composer, streaming an answer with its tokens'
// sources, Stop, editing a turn, settings and the API key.
import { forgetKey, getJSON, hasKey, saveKey, streamChat, Unauthorized } from "./api.js";
import { AnswerPanel, ServerPanel } from "./panel.js";
import { renderAnswer, tooltipText } from "./render.js";
import * as store from "./store.js";

const $ = (sel) => document.querySelector(sel);
const RENDER_EVERY_MS = 100; // a streamed answer is re-rendered at most this often

const state = {
  conversations: store.loadConversations(),
  current: null,
  settings: store.loadSettings(),
  model: null,
  controller: null,
};
const answerPanel = new AnswerPanel($("#panel"));
let serverPanel = null;

function setStatus(text) { $("#status").textContent = text; }

function askKey() {
  const dialog = $("#key-dialog");
  if (dialog.open) return;
  $("#key-input").value = "";
  dialog.showModal();
}

$("#key-form").addEventListener("submit", () => {
  saveKey($("#key-input").value);
  $("#key-input").value = "";
  $("#forget-key").hidden = false;
  boot();
});
$("#forget-key").addEventListener("click", () => { forgetKey(); $("#forget-key").hidden = true; });

// -- conversations -------------------------------------------------------------------

function conversation() {
  if (!state.current) {
    state.current = store.newConversation();
    state.conversations.push(state.current);
  }
  return state.current;
}

function save() { store.saveConversations(state.conversations); listConversations(); }

function listConversations() {
  const list = $("#conversation-list");
  list.replaceChildren();
  for (const c of [...state.conversations].reverse()) {
    const item = document.createElement("li");
    if (c === state.current) item.setAttribute("aria-current", "true");
    const open = Object.assign(document.createElement("button"), { type: "button", className: "open", textContent: c.title });
    open.addEventListener("click", () => { state.current = c; showConversation(); });
    const remove = Object.assign(document.createElement("button"), { type: "button", textContent: "×" });
    remove.setAttribute("aria-label", `Delete ${c.title}`);
    remove.addEventListener("click", () => {
      state.conversations = state.conversations.filter((x) => x !== c);
      if (state.current === c) state.current = null;
      save(); showConversation();
    });
    item.append(open, remove);
    list.append(item);
  }
}

function messageElement(message, index) {
  const el = document.createElement("article");
  el.className = `message ${message.role}${message.error ? " error" : ""}`;
  const role = document.createElement("div");
  role.className = "role";
  role.textContent = message.role === "user" ? "You" : message.error ? "Error" : state.model || "Assistant";
  const body = document.createElement("div");
  body.className = "body";
  if (message.role === "user") {
    body.textContent = message.content;
    const edit = Object.assign(document.createElement("button"), { type: "button", textContent: "Edit" });
    edit.addEventListener("click", () => editTurn(el, index));
    role.append(edit);
  } else if (message.error) {
    body.textContent = message.content;
  } else {
    renderAnswer(body, message.content, message.marks);
  }
  el.append(role, body);
  if (message.note) el.append(Object.assign(document.createElement("p"), { className: "note", textContent: message.note }));
  return el;
}

function showConversation() {
  const box = $("#messages");
  box.replaceChildren(...(state.current?.messages || []).map(messageElement));
  box.scrollTop = box.scrollHeight;
  listConversations();
}

function editTurn(el, index) {
  if (state.controller) return;
  const box = Object.assign(document.createElement("div"), { className: "edit-box" });
  const area = Object.assign(document.createElement("textarea"), { rows: 3, value: state.current.messages[index].content });
  area.setAttribute("aria-label", "Edit this message");
  const resend = Object.assign(document.createElement("button"), { type: "button", textContent: "Send again" });
  const cancel = Object.assign(document.createElement("button"), { type: "button", textContent: "Cancel" });
  resend.addEventListener("click", () => {
    state.current.messages = state.current.messages.slice(0, index);
    send(area.value);
  });
  cancel.addEventListener("click", showConversation);
  area.addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); resend.click(); } });
  box.append(area, resend, cancel);
  el.querySelector(".body").replaceWith(box);
  area.focus();
}

// -- sending -------------------------------------------------------------------------

function requestBody(messages) {
  const s = state.settings;
  const body = {
    model: state.model || "default", stream: true, temperature: Number(s.temperature), max_tokens: Number(s.maxTokens),
    messages: [...(s.system ? [{ role: "system", content: s.system }] : []),
               ...messages.filter((m) => !m.error).map((m) => ({ role: m.role, content: m.content }))],
    specli: { sources: true },
  };
  if (s.logprobs) Object.assign(body, { logprobs: true, top_logprobs: 2 });
  return body;
}

async function send(text) {
  if (!text.trim() || state.controller) return;
  const c = conversation();
  if (!c.messages.length) c.title = text.trim().slice(0, 60);
  c.messages.push({ role: "user", content: text });
  const answer = { role: "assistant", content: "", marks: [] };
  const body = requestBody(c.messages);
  c.messages.push(answer);
  showConversation();
  const el = $("#messages").lastElementChild;
  const bodyEl = el.querySelector(".body");
  state.controller = new AbortController();
  $("#send").hidden = true; $("#stop").hidden = false;
  setStatus("Waiting for the first token…");
  answerPanel.reset();
  let last = 0, timer = null;
  const render = () => { timer = null; last = performance.now(); renderAnswer(bodyEl, answer.content, answer.marks); follow(); };
  try {
    await streamChat(body, (chunk) => {
      const delta = chunk.choices?.[0]?.delta;
      if (delta?.content) answer.content += delta.content;
      if (chunk.specli?.tokens) {
        answer.marks.push(...chunk.specli.tokens);
        answerPanel.update(chunk.specli);
      }
      const finish = chunk.choices?.[0]?.finish_reason;
      if (finish) answer.note = finish === "length" ? "Stopped at the token limit." : "";
      setStatus("Writing…");
      if (!timer) timer = setTimeout(render, Math.max(0, RENDER_EVERY_MS - (performance.now() - last)));
    }, state.controller.signal);
    setStatus("");
  } catch (e) {
    if (e.name === "AbortError") {
      answer.note = "Stopped.";
      setStatus("Stopped.");
    } else if (e instanceof Unauthorized) {
      c.messages.pop();
      askKey();
      setStatus("The server asks for an API key.");
    } else {
      c.messages.pop();
      c.messages.push({ role: "assistant", error: true, content: e.message });
      setStatus("");
    }
  } finally {
    clearTimeout(timer);
    state.controller = null;
    $("#send").hidden = false; $("#stop").hidden = true;
    save();
    showConversation();
  }
}

function follow() {
  const box = $("#messages");
  if (box.scrollHeight - box.scrollTop - box.clientHeight < 120) box.scrollTop = box.scrollHeight;
}

$("#composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("#prompt").value;
  $("#prompt").value = "";
  send(text);
});
$("#prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("#composer").requestSubmit(); }
});
$("#stop").addEventListener("click", () => state.controller?.abort());
$("#new-chat").addEventListener("click", () => {
  if (state.controller) return;
  state.current = null; showConversation(); answerPanel.reset(); $("#prompt").focus();
});

// -- settings ------------------------------------------------------------------------

$("#settings-toggle").addEventListener("click", () => {
  const panel = $("#settings");
  panel.hidden = !panel.hidden;
  $("#settings-toggle").setAttribute("aria-expanded", String(!panel.hidden));
});
const FIELDS = { system: ["#system", "value"], temperature: ["#temperature", "value"], maxTokens: ["#max-tokens", "value"],
                 logprobs: ["#show-logprobs", "checked"] };
for (const [key, [sel, prop]] of Object.entries(FIELDS)) {
  $(sel)[prop] = state.settings[key];
  $(sel).addEventListener("change", () => { state.settings[key] = $(sel)[prop]; store.saveSettings(state.settings); });
}

// -- the token tooltip ----------------------------------------------------------------

$("#messages").addEventListener("mouseover", (e) => {
  const tok = e.target.closest?.(".tok");
  const tip = $("#tooltip");
  if (!tok) { tip.hidden = true; return; }
  const message = state.current?.messages[[...$("#messages").children].indexOf(tok.closest(".message"))];
  const mark = message?.marks?.[Number(tok.dataset.token)];
  if (!mark) return;
  tip.textContent = tooltipText(mark);
  const box = tok.getBoundingClientRect();
  tip.style.left = `${Math.min(box.left, window.innerWidth - 360)}px`;
  tip.style.top = `${box.bottom + 4}px`;
  tip.hidden = false;
});
$("#messages").addEventListener("mouseleave", () => { $("#tooltip").hidden = true; });

// -- start ---------------------------------------------------------------------------

async function boot() {
  $("#forget-key").hidden = !hasKey();
  try {
    await getJSON("/slots"); // answers 401 when the server has a key and this browser lacks it
    const models = await getJSON("/v1/models");
    state.model = models.data?.[0]?.id || null;
    $("#model").textContent = state.model || "";
    if (!serverPanel) { serverPanel = new ServerPanel($("#panel"), askKey); serverPanel.start(); }
    setStatus("");
    document.body.dataset.ready = "true";
  } catch (e) {
    if (e instanceof Unauthorized) { askKey(); setStatus("The server asks for an API key."); return; }
    setStatus(`The server is not ready: ${e.message}. Retrying…`);
    setTimeout(boot, 2000);
  }
}

state.current = state.conversations[state.conversations.length - 1] || null;
showConversation();
answerPanel.reset();
boot();
