// Conversations and settings, kept in this browser's localStorage.
const CONVERSATIONS = "specli.conversations";
const SETTINGS = "specli.settings";
export const DEFAULTS = { system: "", temperature: 0.7, maxTokens: 1024, logprobs: false };

export function loadSettings() {
  try { return { ...DEFAULTS, ...JSON.parse(localStorage.getItem(SETTINGS) || "{}") }; } catch { return { ...DEFAULTS }; }
}
export function saveSettings(s) { localStorage.setItem(SETTINGS, JSON.stringify(s)); }

export function loadConversations() {
  try { return JSON.parse(localStorage.getItem(CONVERSATIONS) || "[]"); } catch { return []; }
}

export function saveConversations(list) {
  try {
    localStorage.setItem(CONVERSATIONS, JSON.stringify(list));
  } catch {
    // storage full: the oldest conversations' token marks go first, then the oldest conversations
    for (const c of list.slice(0, -1)) for (const m of c.messages) delete m.marks;
    try { localStorage.setItem(CONVERSATIONS, JSON.stringify(list)); } catch {
      localStorage.setItem(CONVERSATIONS, JSON.stringify(list.slice(-5)));
    }
  }
}

export function newConversation() {
  return { id: crypto.randomUUID ? crypto.randomUUID() : String(Date.now()), title: "New conversation",
           messages: [], created: Date.now() };
}
