// The side panel: the current answer's figures and a strip chart of its steps (tokens each
// target forward emitted, by the drafter that step used), and the server's slots, queue,
// prompt cache and speculation over the last minutes, from /slots and /metrics.
import { getJSON, getText, parseMetrics, Unauthorized } from "./api.js";
import { SOURCE_NAMES } from "./render.js";

const WINDOW_S = 300;
const POLL_MS = 2000;
const COLOURS = { none: "#8c959f", ngram: "#d4a72c", hybrid: "#2da44e", draft: "#218bff", prediction: "#a475f9",
                  grammar: "#6e7781", suffix: "#fb8f44", heads: "#14b8a6", medusa: "#14b8a6", eagle: "#14b8a6" };

function chart(el, series, height = 120) {
  const style = getComputedStyle(document.documentElement);
  const axis = { size: 40, stroke: style.getPropertyValue("--muted"), grid: { stroke: style.getPropertyValue("--line") },
                 ticks: { stroke: style.getPropertyValue("--line") } };
  const opts = {
    width: el.clientWidth || 280, height, legend: { show: false }, cursor: { show: false },
    scales: { x: { time: false } }, axes: [{ show: false }, axis],
    series: [{}, ...series],
  };
  const data = [[], ...series.map(() => [])];
  return new window.uPlot(opts, data, el);
}

export class AnswerPanel {
  constructor(root) {
    this.root = root;
    this.chartEl = root.querySelector("#steps-chart");
    this.drafters = [];
    this.steps = [];
    this.plot = null;
    this.pending = false;
    const legend = root.querySelector("#legend");
    for (const [source, name] of Object.entries(SOURCE_NAMES)) {
      const item = document.createElement("li");
      item.innerHTML = `<span class="tok" data-source="${source}">${source}</span>`;
      item.title = name;
      legend.append(item);
    }
  }

  reset() {
    this.steps = [];
    this.drafters = [];
    this.show({ tokens_per_s: null, acceptance: null, tokens_per_forward: null, generated: null }, null);
    this.draw();
  }

  show(live, prompt) {
    const set = (key, value) => { this.root.querySelector(`[data-figure="${key}"]`).textContent = value; };
    set("tokens_per_s", live.tokens_per_s == null ? "–" : live.tokens_per_s.toFixed(1));
    set("acceptance", live.acceptance == null ? "–" : `${(100 * live.acceptance).toFixed(0)}%`);
    set("tokens_per_forward", live.tokens_per_forward == null ? "–" : live.tokens_per_forward.toFixed(2));
    set("generated", live.generated == null ? "–" : String(live.generated));
    if (prompt !== undefined) {
      set("restored", prompt == null ? "–" : `${prompt.restored} of ${prompt.tokens}` + (prompt.from ? ` (${prompt.from})` : ""));
    }
  }

  // One chunk's `specli` object: its steps, its figures, the prompt on the first.
  update(sources) {
    for (const step of sources.steps) this.steps.push(step);
    this.show(sources.live, sources.prompt);
    if (!this.pending) {
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.draw(); });
    }
  }

  draw() {
    const names = [...new Set(this.steps.map((s) => (s[1] ? s[0] : "none")))];
    if (!this.plot || names.join() !== this.drafters.join()) {
      this.plot?.destroy();
      this.chartEl.replaceChildren();
      this.drafters = names;
      const bars = window.uPlot.paths.bars({ size: [0.9, 6] });
      this.plot = chart(this.chartEl, names.map((n) => ({ label: n, fill: COLOURS[n] || "#999", stroke: COLOURS[n] || "#999",
                                                           paths: bars, points: { show: false } })));
    }
    const x = this.steps.map((_, i) => i);
    const ys = this.drafters.map((n) => this.steps.map((s) => ((s[1] ? s[0] : "none") === n ? s[3] : null)));
    this.plot.setData([x, ...ys]);
  }
}

export class ServerPanel {
  constructor(root, onUnauthorized) {
    this.root = root;
    this.samples = [];
    this.onUnauthorized = onUnauthorized;
    this.plot = chart(root.querySelector("#server-chart"), [
      { label: "tokens/forward", stroke: "#218bff", points: { show: false } },
      { label: "acceptance", stroke: "#2da44e", points: { show: false } },
    ], 110);
  }

  start() { this.poll(); this.timer = setInterval(() => this.poll(), POLL_MS); }

  set(key, value) { this.root.querySelector(`[data-server="${key}"]`).textContent = value; }

  async poll() {
    let slots, m;
    try {
      [slots, m] = await Promise.all([getJSON("/slots"), getText("/metrics").then(parseMetrics)]);
    } catch (e) {
      if (e instanceof Unauthorized) this.onUnauthorized();
      return;
    }
    const busy = slots.filter((s) => s.is_processing).length;
    this.set("slots", `${busy} of ${slots.length}`);
    this.set("queue", String(m["specli:requests_waiting"] ?? 0));
    const ram = m['specli:prompt_cache_entries{where="ram"}'], disk = m['specli:prompt_cache_entries{where="disk"}'];
    const hits = m["specli:prompt_cache_hits_total"];
    this.set("cache", ram === undefined ? "off" : `${ram} in RAM, ${disk} on disk, ${hits} hits`);
    const now = Date.now() / 1000;
    this.samples.push({ t: now, drafted: m["specli:spec_decode_num_draft_tokens_total"] ?? 0,
                        accepted: m["specli:spec_decode_num_accepted_tokens_total"] ?? 0,
                        tokens: m["specli:generation_tokens_total"] ?? 0, forwards: m["specli:target_forwards_total"] ?? 0 });
    this.samples = this.samples.filter((s) => now - s.t <= WINDOW_S);
    const first = this.samples[0], last = this.samples[this.samples.length - 1];
    const drafted = last.drafted - first.drafted, forwards = last.forwards - first.forwards;
    this.set("acceptance", drafted ? `${(100 * (last.accepted - first.accepted) / drafted).toFixed(0)}%` : "–");
    this.set("per_forward", forwards ? ((last.tokens - first.tokens) / forwards).toFixed(2) : "–");
    this.draw();
  }

  draw() {
    const x = [], perForward = [], acceptance = [];
    for (let i = 1; i < this.samples.length; i++) {
      const a = this.samples[i - 1], b = this.samples[i];
      x.push(b.t);
      const f = b.forwards - a.forwards, d = b.drafted - a.drafted;
      perForward.push(f ? (b.tokens - a.tokens) / f : null);
      acceptance.push(d ? (b.accepted - a.accepted) / d : null);
    }
    this.plot.setData([x, perForward, acceptance]);
  }
}
