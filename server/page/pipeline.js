"use strict";
// The live view of the pipeline: /api/pipeline streams the engine's profiler events (disk reads, decoding,
// transfers to the device, compute per layer, waits, sampling) in batches; they are drawn on a moving
// timeline, one lane per stage and one color per layer, with tokens per second and bytes read per token. While
// the engine is idle the timeline stops on the last burst of work (the last answer), zoomed to fit.
const Pipeline = (() => {
  const lanes = [
    ["disk_read", "disk read"], ["decode", "decode"], ["h2d", "to device"],
    ["prefetch_wait", "waiting"], ["forward", "compute"], ["sample", "sample"],
  ];
  const laneOf = Object.fromEntries(lanes.map(([c], i) => [c, i]));
  const windowMs = 3000; // visible history
  const idleMs = 1000; // a gap this long between events ends a burst
  let layers = 1;
  let events = []; // {c, l, t, d, b} in server milliseconds
  let offset = null; // server time − performance.now()
  let burst = null; // the current or last burst of work: {start, end, tokens0, tokens, bytes} (server ms)
  let received = 0;
  let lastTokens = null; // the tokens count of the previous batch
  let canvas, ctx;

  const color = (layer) => layer < 0 ? "#8a8f98" : `hsl(${Math.round((layer / Math.max(layers, 1)) * 300)}, 70%, 52%)`;

  function bytes(n) {
    const units = ["B", "KB", "MB", "GB"];
    let i = 0;
    while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
    return (i ? n.toFixed(1) : Math.round(n)) + " " + units[i];
  }

  // batch takes one server-sent batch: its events, and the stats of the burst they belong to.
  function batch(b) {
    const now = performance.now();
    for (const e of b.events) {
      if (!(e.c in laneOf)) continue;
      events.push(e);
      const end = e.t + e.d;
      if (offset === null || end - now > offset) offset = end - now;
      if (!burst || e.t - burst.end > idleMs) burst = { start: e.t, end, tokens0: lastTokens ?? b.tokens, tokens: b.tokens, bytes: 0 };
      burst.end = Math.max(burst.end, end);
      if (e.c === "disk_read") burst.bytes += e.b || 0;
    }
    received += b.events.length;
    document.body.dataset.pipelineEvents = received;
    if (burst && b.events.length) burst.tokens = b.tokens;
    lastTokens = b.tokens;
    document.getElementById("active").textContent = String(b.active);
    if (b.dropped) document.getElementById("pipeline-status").textContent = `${b.dropped} events dropped (the page fell behind)`;
    if (!burst) return;
    const tokens = burst.tokens - burst.tokens0, secs = Math.max(burst.end - burst.start, 1) / 1000;
    document.getElementById("tps").textContent = tokens > 0 ? (tokens / secs).toFixed(1) : "–";
    document.getElementById("bpt").textContent = tokens > 0 ? bytes(burst.bytes / tokens) : "–";
  }

  function draw() {
    requestAnimationFrame(draw);
    const w = canvas.clientWidth, h = canvas.clientHeight, dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(w * dpr)) { canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr); }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const label = 78, laneH = (h - 18) / lanes.length;
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    lanes.forEach(([, name], i) => {
      ctx.fillStyle = i % 2 ? "#f6f7f9" : "#eef0f3";
      ctx.fillRect(label, i * laneH, w - label, laneH);
      ctx.fillStyle = "#444";
      ctx.fillText(name, 4, i * laneH + laneH / 2);
    });
    if (offset === null) return;
    // Live: the last windowMs, moving. Idle: the last burst, zoomed to fit.
    let right = performance.now() + offset, span = windowMs;
    const idle = burst && right - burst.end > idleMs;
    if (idle) {
      span = Math.min(Math.max((burst.end - burst.start) * 1.1, 5), windowMs);
      right = burst.end + span * 0.05;
    }
    const left = right - span;
    const x = (t) => label + ((t - left) / span) * (w - label);
    events = events.filter((e) => e.t + e.d >= Math.min(left, performance.now() + offset - windowMs) - 1000);
    for (const e of events) {
      const i = laneOf[e.c];
      const x0 = x(e.t), x1 = Math.max(x(e.t + e.d), x0 + 1);
      ctx.fillStyle = color(e.l);
      ctx.fillRect(x0, i * laneH + 3, x1 - x0, laneH - 6);
    }
    // Ticks: seconds before now while live; milliseconds from the burst's start while idle.
    ctx.fillStyle = "#666";
    const origin = idle ? burst.start : right;
    const tick = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000].find((t) => span / t <= 7);
    for (let t = origin + Math.ceil((left - origin) / tick) * tick; t <= right; t += tick) {
      const px = x(t), rel = t - origin;
      ctx.fillRect(px, h - 18, 1, 4);
      ctx.fillText(idle ? `${Math.round(rel)} ms` : (rel === 0 ? "now" : `${(rel / 1000).toFixed(1)} s`), px + 3, h - 8);
    }
    const status = idle ? `Idle: the last burst of work (${(burst.end - burst.start).toFixed(0)} ms), zoomed to fit. One lane per stage, one color per layer.`
      : "Live: one lane per stage, one color per layer.";
    const el = document.getElementById("pipeline-status");
    if (!el.textContent.includes("dropped") && el.textContent !== status) el.textContent = status;
  }

  function legend() {
    const el = document.getElementById("legend");
    el.replaceChildren();
    const add = (text, c) => {
      const span = document.createElement("span");
      const dot = document.createElement("i");
      dot.style.background = c;
      span.append(dot, text);
      el.append(span);
    };
    add("layer 0", color(0));
    if (layers > 2) add(`layer ${Math.floor(layers / 2)}`, color(Math.floor(layers / 2)));
    if (layers > 1) add(`layer ${layers - 1}`, color(layers - 1));
    add("embed, head, sampling", color(-1));
  }

  // readSSE calls onData with every data line of a server-sent event stream.
  async function readSSE(resp, onData) {
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of ev.split("\n")) if (line.startsWith("data: ")) onData(line.slice(6));
      }
    }
  }

  // start connects (again after a failure, every few seconds) and draws; headers carries the API key. The
  // promise it returns is settled once the first connection is up (or failed).
  function start(nLayers, headers) {
    return new Promise((connected) => run(nLayers, headers, connected));
  }

  async function run(nLayers, headers, connected) {
    layers = nLayers;
    canvas = document.getElementById("timeline");
    ctx = canvas.getContext("2d");
    legend();
    requestAnimationFrame(draw);
    const status = document.getElementById("pipeline-status");
    for (;;) {
      try {
        const resp = await fetch("/api/pipeline", { headers: headers() });
        if (!resp.ok) throw new Error((await resp.json()).error?.message || resp.statusText);
        status.textContent = "Live: one lane per stage, one color per layer.";
        await readSSE(resp, (d) => { batch(JSON.parse(d)); connected(); });
      } catch (err) {
        status.textContent = "Pipeline view unavailable: " + err.message;
        connected();
      }
      await new Promise((r) => setTimeout(r, 3000));
    }
  }

  return { start, readSSE };
})();
