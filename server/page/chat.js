"use strict";
// The chat page: a conversation streamed from /v1/chat/completions, with a stop button, a new chat, a system
// prompt and sampling settings; the API key, when the server wants one, is asked for and kept in this tab's
// sessionStorage (a link may carry it as #key=KEY: the fragment never reaches the server, and is removed from
// the address at once). For tests, ?prompt=TEXT&autosend=1 sends a message on load (temperature, top_p,
// max_tokens and system may be given too); body[data-state] is "ready", "answering" or "done".
(() => {
  const $ = (id) => document.getElementById(id);
  const keyName = "layerstream-api-key";
  const params = new URLSearchParams(location.search);
  let turns = []; // {role, content}
  let controller = null; // the answer being streamed

  const headers = () => {
    const h = { "Content-Type": "application/json" };
    const key = sessionStorage.getItem(keyName);
    if (key) h.Authorization = "Bearer " + key;
    return h;
  };

  function askKey() {
    return new Promise((resolve) => {
      const dialog = $("key-dialog");
      $("key-input").value = sessionStorage.getItem(keyName) || "";
      $("key-cancel").onclick = () => dialog.close("cancel");
      dialog.onclose = () => {
        if (dialog.returnValue === "ok" && $("key-input").value) sessionStorage.setItem(keyName, $("key-input").value);
        resolve();
      };
      dialog.showModal();
    });
  }

  // info reads /api/info, asking for the key while the server refuses it.
  async function info() {
    for (;;) {
      const resp = await fetch("/api/info", { headers: headers() });
      if (resp.status !== 401) return resp.json();
      await askKey();
    }
  }

  function bubble(role, text) {
    $("hint")?.remove();
    const el = document.createElement("div");
    el.className = "message " + role;
    const body = document.createElement("div");
    body.className = "body";
    el.append(body);
    $("messages").append(el);
    show(el, text);
    return el;
  }

  // show renders a message's text: Markdown for the model, plain text for the user.
  function show(el, text) {
    el.dataset.raw = text;
    const body = el.querySelector(".body");
    if (el.classList.contains("assistant")) body.innerHTML = Markdown.render(text); // escaped by the renderer
    else body.textContent = text;
    $("messages").scrollTop = $("messages").scrollHeight;
  }

  function note(el, text, error) {
    const n = document.createElement("div");
    n.className = error ? "note error" : "note";
    n.textContent = text;
    el.append(n);
  }

  function busy(on) {
    $("send").disabled = on;
    $("stop").disabled = !on;
    document.body.dataset.state = on ? "answering" : "done";
  }

  function request() {
    const system = $("system").value.trim();
    const messages = (system ? [{ role: "system", content: system }] : []).concat(turns);
    return {
      messages, stream: true, stream_options: { include_usage: true },
      temperature: Number($("temperature").value), top_p: Number($("top-p").value),
      max_tokens: Math.max(1, Math.round(Number($("max-tokens").value) || 1)),
    };
  }

  async function send(text) {
    if (!text.trim() || controller) return;
    turns.push({ role: "user", content: text });
    bubble("user", text);
    const el = bubble("assistant", "");
    el.classList.add("streaming");
    controller = new AbortController();
    busy(true);
    let answer = "", usage = null, finish = null;
    const started = performance.now();
    try {
      const resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(request()), signal: controller.signal });
      if (!resp.ok) throw new Error((await resp.json()).error?.message || resp.statusText);
      await Pipeline.readSSE(resp, (data) => {
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices?.[0];
        if (choice?.delta?.content) { answer += choice.delta.content; show(el, answer); }
        if (choice?.finish_reason) finish = choice.finish_reason;
      });
      const secs = (performance.now() - started) / 1000;
      if (usage) note(el, `${usage.completion_tokens} tokens in ${secs.toFixed(1)} s (${(usage.completion_tokens / secs).toFixed(1)} tokens/s)${finish === "length" ? ", stopped at max tokens" : ""}`);
    } catch (err) {
      if (err.name === "AbortError") note(el, "stopped");
      else note(el, err.message, true);
    } finally {
      el.classList.remove("streaming");
      if (answer) turns.push({ role: "assistant", content: answer });
      else turns.pop(); // nothing answered: forget the question too
      controller = null;
      busy(false);
    }
  }

  function newChat() {
    controller?.abort();
    turns = [];
    $("messages").replaceChildren();
  }

  function bindSettings() {
    for (const [id, key] of [["temperature", "temperature"], ["top-p", "top_p"], ["max-tokens", "max_tokens"], ["system", "system"]]) {
      if (params.has(key)) $(id).value = params.get(key);
    }
    for (const id of ["temperature", "top-p"]) {
      const out = $(id + "-value");
      const update = () => { out.textContent = $(id).value; };
      $(id).addEventListener("input", update);
      update();
    }
  }

  async function main() {
    const fragment = new URLSearchParams(location.hash.slice(1));
    if (fragment.get("key")) {
      sessionStorage.setItem(keyName, fragment.get("key"));
      window.history.replaceState(null, "", location.pathname + location.search);
    }
    bindSettings();
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      const text = $("input").value;
      $("input").value = "";
      send(text);
    });
    $("input").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
    });
    $("stop").addEventListener("click", () => controller?.abort());
    $("new-chat").addEventListener("click", newChat);
    $("key-button").addEventListener("click", askKey);
    const m = await info();
    $("model").textContent = `${m.model} · ${m.context_length.toLocaleString("en")} tokens of context · ${m.layers} layers`;
    $("max-tokens").max = m.max_tokens;
    if (!params.has("max_tokens")) $("max-tokens").value = Math.min(512, m.max_tokens, Math.floor(m.context_length / 2)); // room for the prompt
    document.title = m.model + " · layerstream";
    if (m.pipeline) await Pipeline.start(m.layers, headers); // connected before anything is sent
    else $("pipeline-status").textContent = "This server has no profiler: no pipeline view.";
    document.body.dataset.state = "ready";
    if (params.get("autosend") === "1" && params.get("prompt")) send(params.get("prompt"));
  }

  main().catch((err) => {
    document.body.dataset.state = "error";
    bubble("assistant", "").querySelector(".body").textContent = "The page could not start: " + err.message;
  });
})();
