// Every page: the jump box (Ctrl-K / ⌘K) over chapters, exercises and instruments, and the
// helpers the instruments share: their embedded data, and whether the local server answers.
"use strict";
const Site = (() => {
  const read = id => { const el = document.getElementById(id); return el ? JSON.parse(el.textContent) : null; };
  const data = read("page-data");
  // Only `tpucourse site --serve` answers /api/ping; a static build (file:// or any other server) does not.
  const served = location.protocol.startsWith("http")
    ? fetch("api/ping").then(r => r.ok ? r.json() : null).then(j => Boolean(j && j.serve)).catch(() => false)
    : Promise.resolve(false);
  // The local server's answer. Slow work (a compile, the learner's own code) is answered 202 with
  // what it is doing: `working` is told, and the question asked again until the answer comes;
  // once `stale()` says the page asked something else meanwhile, the answer is null.
  async function api(path, params, { working = () => {}, stale = () => false } = {}) {
    for (;;) {
      const response = await fetch(`api/${path}?${new URLSearchParams(params)}`);
      const answer = await response.json();
      if (stale()) return null;
      if (response.status === 202) {
        working(answer.working);
        await new Promise(done => setTimeout(done, 700));
        if (stale()) return null;
        continue;
      }
      if (!response.ok) throw new Error(answer.error || response.statusText);
      return answer;
    }
  }
  const us = seconds => `${(seconds * 1e6).toFixed(1)} µs`;
  const el = (tag, attrs = {}, text = "") => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text) node.textContent = text;
    return node;
  };
  return { data, served, api, us, el };
})();

(() => {
  const index = JSON.parse(document.getElementById("jump-index").textContent);
  const box = document.getElementById("jump"), input = document.getElementById("jump-input"),
        list = document.getElementById("jump-list");
  let shown = [], selected = 0;
  function render() {
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    shown = index.filter(e => words.every(w => (e.title + " " + e.kind).toLowerCase().includes(w))).slice(0, 40);
    selected = Math.min(selected, Math.max(0, shown.length - 1));
    list.replaceChildren(...shown.map((e, i) => {
      const li = Site.el("li", i === selected ? { class: "sel" } : {});
      const a = Site.el("a", { href: e.href });
      a.append(Site.el("span", {}, e.kind), document.createTextNode(e.title));
      li.append(a);
      return li;
    }));
  }
  function open() { box.hidden = false; input.value = ""; selected = 0; render(); input.focus(); }
  function close() { box.hidden = true; }
  document.addEventListener("keydown", ev => {
    if ((ev.metaKey || ev.ctrlKey) && ev.key.toLowerCase() === "k") { ev.preventDefault(); box.hidden ? open() : close(); }
    else if (!box.hidden && ev.key === "Escape") close();
  });
  document.getElementById("jump-open").addEventListener("click", open);
  box.addEventListener("click", ev => { if (ev.target === box) close(); });
  input.addEventListener("input", () => { selected = 0; render(); });
  input.addEventListener("keydown", ev => {
    if (ev.key === "ArrowDown") { selected = Math.min(selected + 1, shown.length - 1); render(); ev.preventDefault(); }
    else if (ev.key === "ArrowUp") { selected = Math.max(selected - 1, 0); render(); ev.preventDefault(); }
    else if (ev.key === "Enter" && shown[selected]) { location.href = shown[selected].href; close(); }
  });
})();
